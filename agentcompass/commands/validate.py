"""`agentcompass validate BENCHMARK`: prove a recipe plus an environment before paying for a model.

Runs the oracle and nop harnesses over the selection as two ordinary runs (same run name, so
the results sit side by side) and checks, per task, that the oracle passed and nop failed.
Exit 1 when any task breaks that rule, 0 otherwise.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


HARNESSES = ("oracle", "nop")
EXAMPLES = """examples:
  agentcompass validate demo
  agentcompass validate terminal_bench_2 --env docker --benchmark-params '{"limit": 5}'
  agentcompass validate terminal_bench_2 --env docker --sample 10 --seed 7
"""


def register(subparsers: Any) -> None:
    from agentcompass.commands.args import add_overlay_args, add_pacing_args, env_help, positive_int

    parser = subparsers.add_parser("validate", help="check that the oracle passes and nop fails on every task",
                                   epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("benchmark", metavar="BENCHMARK", help="a benchmark from `agentcompass list benchmarks`")
    parser.add_argument("--env", default=None, help=env_help())
    parser.add_argument("--benchmark-params", metavar="JSON", help="deep-merged into benchmark.params (e.g. sample_ids)")
    parser.add_argument("--env-params", metavar="JSON", help="deep-merged into env")
    parser.add_argument("--task-concurrency", type=positive_int, metavar="N", help="trials at once (default 4)")
    parser.add_argument("--sample", type=positive_int, metavar="N",
                        help="N tasks drawn at random (with --seed) instead of every task; the summary line says which")
    parser.add_argument("--seed", type=int, default=0, metavar="S", help="the draw's seed for --sample (default 0)")
    add_pacing_args(parser)
    add_overlay_args(parser)
    parser.add_argument("--results-dir", metavar="DIR", help="default results/")
    parser.add_argument("--run-name", metavar="NAME", help="default validate-<start time>-<random suffix>; reuse a name to resume")
    # What build_invocation reads that validate fixes: no model, no harness settings.
    parser.set_defaults(harness_params=None, model_params=None, model_api_key=None, model_base_url=None)


def handle(args: argparse.Namespace, argv: list[str]) -> int:
    from agentcompass.commands.args import build_invocation, run_name_of
    from agentcompass.commands.evaluate import batch_overrides
    from agentcompass.core.launch import prepare_all
    from agentcompass.core.results import ResultsStore
    from agentcompass.core.runner import execute

    args.run_name = run_name_of(args, "validate-")
    if args.sample:
        args.benchmark_params = sampled(args.benchmark_params, args.sample, args.seed)
    # Prepare both runs before either starts, so bad input leaves nothing behind.
    runs = {}
    extra = batch_overrides(args.env, args.benchmark, args.config_dir)  # SWE-bench on gcp: one Batch job per run
    for harness in HARNESSES:
        invocation = build_invocation(args, [args.benchmark, harness, "none"], extra)
        _, prepared, _, _ = prepare_all(invocation, multirun=False)
        runs[harness] = next(iter(prepared.values()))
    outcomes: dict[str, dict[str, list[Any]]] = {}
    for harness, prepared in runs.items():
        print(f"validate: {harness} on {len(prepared.tasks)} task(s)", file=sys.stderr, flush=True)
        execute(prepared, argv)
        by_task: dict[str, list[Any]] = {}
        for result in ResultsStore(prepared.run_dir).finished().values():
            by_task.setdefault(result.task_id, []).append(result)
        outcomes[harness] = by_task
    task_ids = [t.id for t in runs["oracle"].tasks]
    broken = report(task_ids, outcomes)
    print(summary_line(args, task_ids, outcomes))
    print("results: " + "  ".join(str(p.run_dir) for p in runs.values()))
    if broken:
        print(f"validate: {len(broken)} of {len(task_ids)} task(s) break the rule (oracle passes, nop fails): "
              f"{', '.join(broken)}", file=sys.stderr)
        return 1
    return 0


def sampled(benchmark_params: str | None, size: int, seed: int) -> str:
    """--benchmark-params with the draw: `limit` tasks after a seeded shuffle (the formats' own selection)."""
    import json

    from agentcompass.core.errors import UserError
    from agentcompass.core.overrides import parse_json_object

    params = parse_json_object("benchmark_params", benchmark_params) if benchmark_params else {}
    clash = [key for key in ("limit", "shuffle", "seed") if key in params]
    if clash:
        raise UserError(f"--sample draws the tasks itself; drop {', '.join(clash)} from --benchmark-params "
                        "(or drop --sample)")
    return json.dumps({**params, "limit": size, "shuffle": True, "seed": seed})


def summary_line(args: argparse.Namespace, task_ids: list[str], outcomes: dict[str, dict[str, list[Any]]]) -> str:
    """One line to keep (docs/datasets.md's table): what was validated where, when, and how it came out."""
    from datetime import datetime, timezone

    oracle = sum(verdict(outcomes["oracle"].get(t, [])) == "passed" for t in task_ids)
    nop = sum(verdict(outcomes["nop"].get(t, [])) == "failed" for t in task_ids)
    drawn = f"a sample of {len(task_ids)} (seed {args.seed})" if args.sample else f"{len(task_ids)} task(s)"
    return (f"validated {args.benchmark} on {args.env or 'local'}, {drawn}: oracle passed {oracle}/{len(task_ids)}, "
            f"nop failed {nop}/{len(task_ids)}, {datetime.now(timezone.utc):%Y-%m-%d}")


def verdict(results: list[Any]) -> str:
    """passed when every attempt passed, else the first non-passing status (with an error's category)."""
    if not results:
        return "missing"
    for result in results:
        if result.status == "error":
            return f"error ({result.error_category})"
    return "passed" if all(r.status == "passed" for r in results) else "failed"


def report(task_ids: list[str], outcomes: dict[str, dict[str, list[Any]]]) -> list[str]:
    """Print one line per task; return the tasks that break the rule."""
    width = max([len(t) for t in task_ids] + [4])
    print(f"{'TASK'.ljust(width)}  {'ORACLE':<20}  {'NOP':<20}  VERDICT")
    broken = []
    for task_id in task_ids:
        oracle = verdict(outcomes["oracle"].get(task_id, []))
        nop = verdict(outcomes["nop"].get(task_id, []))
        problems = []
        if oracle != "passed":
            # A hook that failed or an artifact never written explains the verdict better than the verifier does
            # (DeepSWE's: "no model.patch submitted").
            why = collect_problems(outcomes["oracle"].get(task_id, []))
            problems.append(f"oracle {oracle}" + (f": {why}" if why else first_message(outcomes['oracle'].get(task_id, []))))
        if nop != "failed":
            problems.append(f"nop {nop}" + (": the tests pass without any work" if nop == "passed" else ""))
        if problems:
            broken.append(task_id)
        line = "ok" if not problems else "BROKEN: " + "; ".join(problems)
        print(f"{task_id.ljust(width)}  {oracle:<20}  {nop:<20}  {line}")
    return broken


def first_message(results: list[Any]) -> str:
    message = next((r.message for r in results if r.status != "passed" and r.message), "")
    return f" ({message.splitlines()[0][:160]})" if message else ""


def collect_problems(results: list[Any]) -> str:
    """What went wrong collecting the agent's work (Harbor's [[verifier.collect]] hooks, declared artifacts)."""
    from agentcompass.formats.harbor.collect import hook_failures

    for result in results:
        collected = (result.details or {}).get("collected") or {}
        found = hook_failures(collected) + [f"declared artifact {path} was never written (a missing [[verifier.collect]] hook?)"
                                            for path in collected.get("missing", [])]
        if found:
            return "; ".join(found)
    return ""
