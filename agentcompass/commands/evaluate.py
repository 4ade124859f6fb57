"""`agentcompass eval BENCHMARK --predictions FILE`: grade existing patches without running an agent.

It is an ordinary run of the `predictions` harness over the benchmark's selection, so the
results land in the usual layout (<results>/<run>/<benchmark>__predictions__<model>__<env>/),
with the model label taken from the file's model_name_or_path. Only instances with a prediction
are run; the summary's rate is over the whole selection, as the official run report's is.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

EXAMPLES = """examples:
  agentcompass eval swebench_verified --predictions preds.jsonl --env docker --task-concurrency 8
  agentcompass eval swebench_lite --predictions results/r1/swebench_lite__mini_swe_agent__gpt__modal/predictions.jsonl \\
      --env docker --run-name regrade
"""
# run's flags that eval does not take: left unset for cli.build_invocation
UNUSED_RUN_FLAGS = ("harness_params", "model_params", "model_base_url", "model_api_key", "k")


def register(sub: Any) -> None:
    from agentcompass.commands.args import add_overlay_args, env_help, non_negative_int, positive_int

    parser = sub.add_parser("eval", help="grade a SWE-bench predictions file (no agent) into the results layout",
                            epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("benchmark", metavar="BENCHMARK", help="a SWE-bench recipe, e.g. swebench_verified")
    parser.add_argument("--predictions", required=True, type=Path, metavar="FILE",
                        help=".jsonl, .json list, or .json object keyed by instance_id")
    parser.add_argument("--env", default=None, help=env_help())
    parser.add_argument("--task-concurrency", type=positive_int, metavar="N", help="instances at once (default 4)")
    parser.add_argument("--max-retries", type=non_negative_int, metavar="N", help="infra retries (default 2)")
    parser.add_argument("--run-name", metavar="NAME", help="default: the start time to the microsecond and a random suffix; reuse a name to resume")
    parser.add_argument("--retry-errors", action="store_true", default=None,
                        help="on resume, regrade the instances recorded as errors (e.g. a Batch task that failed)")
    parser.add_argument("--results-dir", metavar="DIR", help="default results/")
    parser.add_argument("--benchmark-params", metavar="JSON", help="e.g. a local dataset file: '{\"path\": \"rows.jsonl\"}'")
    parser.add_argument("--env-params", metavar="JSON", help="deep-merged into env, e.g. '{\"image\": ...}'")
    add_overlay_args(parser)


def handle(args: argparse.Namespace, argv: list[str]) -> int:
    from agentcompass.commands.args import build_invocation, run_name_of
    from agentcompass.core.errors import UserError
    from agentcompass.harnesses.predictions import read_predictions
    from agentcompass.core.launch import launch
    from agentcompass.core.overrides import hydra_value, parse_json_object

    check_grades_patches(args.benchmark, args.config_dir)
    predictions = read_predictions(args.predictions)
    if not predictions:
        raise UserError(f"{args.predictions} holds no predictions")
    params = parse_json_object("benchmark_params", args.benchmark_params) if args.benchmark_params else {}
    if params.get("evaluation_mode", "fresh") != "fresh":
        raise UserError("eval grades each prediction as the official harness does (evaluation_mode 'fresh'); "
                        "drop evaluation_mode from --benchmark-params")
    # The tasks are the dataset's selection (sample_ids, filter, limit), as the official run report's
    # total: an instance without a prediction is not run and counts as unresolved.
    params["evaluation_mode"] = "fresh"
    args.benchmark_params = json.dumps(params)
    for flag in UNUSED_RUN_FLAGS:
        setattr(args, flag, None)
    args.run_name = run_name_of(args)
    model = next((str(p["model_name_or_path"]) for p in predictions.values() if p.get("model_name_or_path")), "predictions")
    extra = [f"model.name={hydra_value(model)}",
             f"++harness.predictions={hydra_value(str(args.predictions.resolve()))}"]
    extra += batch_overrides(args.env, args.benchmark, args.config_dir)
    invocation = build_invocation(args, [args.benchmark, "predictions", "custom"], extra)
    return launch(invocation, multirun=False, argv=argv)


def batch_overrides(env: str | None, benchmark: str, config_dirs: list[Path]) -> list[str]:
    """On a gcp env, a benchmark whose format grades on a batch backend is graded by ONE GCP Batch job
    (env gcp_batch, the same settings) instead of a VM per instance."""
    import yaml

    from agentcompass.core.catalog import group_entries, recipe_format, search_roots
    from agentcompass.core.registry import load

    roots = search_roots(config_dirs)
    path = group_entries("env", roots).get(env or "")
    if path is None:
        return []
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if (data.get("impl") or data.get("name") or env) != "gcp":
        return []
    fmt = recipe_format(benchmark, roots)
    return ["++env.impl=gcp_batch"] if fmt and getattr(load("format", fmt), "batch_work", None) is not None else []


def check_grades_patches(benchmark: str, config_dirs: list[Path]) -> None:
    """eval needs a recipe whose format grades patches (SWE-bench); say which recipes do."""
    from agentcompass.core.catalog import check_choice, group_entries, recipe_format, search_roots
    from agentcompass.core.errors import UserError
    from agentcompass.core.registry import load

    roots = search_roots(config_dirs)
    check_choice("benchmark", benchmark, roots)

    def grades_patches(name: str) -> bool:
        fmt = recipe_format(name, roots)
        try:
            return fmt is None or hasattr(load("format", fmt), "apply_patch")  # unknown: let the run decide
        except UserError:  # a user recipe naming a format that does not load
            return False

    if not grades_patches(benchmark):
        usable = [name for name in sorted(group_entries("benchmark", roots)) if recipe_format(name, roots) and grades_patches(name)]
        raise UserError(f"'{benchmark}' is not a SWE-bench recipe (format '{recipe_format(benchmark, roots)}'): eval grades "
                        f"SWE-bench predictions; pick one of {', '.join(usable)}")

