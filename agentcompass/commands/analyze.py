"""`agentcompass analyze RUN...`: every attempt of finished runs through the rule detectors and the
failure taxonomy (docs/analyze.md); writes analysis.jsonl and analysis.json in each run and prints a
table of flags and failure modes per setup."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from agentcompass.commands.analyze_judge import add_judge_args

EXAMPLES = """examples:
  agentcompass analyze results/nightly                         # every setup of a run name
  agentcompass analyze results/nightly/demo__nop__none__local  # one setup
  agentcompass analyze results/nightly --flagged-as failed     # and the rates with flagged passes failed
  agentcompass analyze results/nightly --judge claude-sonnet-4-5  # and an LLM judge's rubric per attempt
"""


def register(sub: Any) -> None:
    parser = sub.add_parser("analyze", help="flag attempts that may have cheated; name why each failed attempt failed",
                            epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, metavar="RUN",
                        help="a run directory, a run name holding several (a sweep), or a results root")
    parser.add_argument("--flagged-as", choices=["failed"], metavar="failed",
                        help="also write summary.flagged-as-failed.json: the run's rates with every flagged pass "
                             "scored as a failure (the run's own trials.jsonl and summary.json are left as they are)")
    add_judge_args(parser)


def handle(args: argparse.Namespace, argv: list[str]) -> int:
    from agentcompass.analyze.analysis import analyze_run, check_finished, run_dirs

    dirs = [d for path in args.runs for d in run_dirs(path)]
    for d in dirs:  # every path checked before anything is written
        check_finished(d)
    judge = make_judge(args)
    summaries = [analyze_run(d, judge) for d in dirs]
    print(f"{'setup':<48} {'attempts':>8} {'passed':>6} {'flagged':>7} {'passed+clean':>12}  flags / failure modes")
    for s in summaries:
        flags = " ".join(f"{k}={v}" for k, v in s["flags"].items()) or "-"
        modes = " ".join(f"{k}={v}" for k, v in s["failure_modes"].items()) or "-"
        print(f"{Path(s['run_dir']).name:<48} {s['attempts']:>8} {s['passed']:>6} {s['flagged']:>7} "
              f"{s['passed_not_flagged']:>12}  flags: {flags} | failures: {modes}")
    for s in summaries:
        if "judge" in s:
            print_judge(s)
    for d in dirs:
        print(f"written: {d / 'analysis.jsonl'}")
    if args.flagged_as == "failed":
        from agentcompass.analyze.rescore import RESCORED_FILE, write_rescored
        from agentcompass.core.scoring import rate

        for d in dirs:
            rescored = write_rescored(d)
            print(f"{d.name}: flagged as failed: {len(rescored['flagged_attempts'])} pass(es); pass@1 "
                  f"{rate(rescored['pass_at_1'])}, solved {rescored['solved_tasks']}/{rescored['tasks']} "
                  f"(written: {d / RESCORED_FILE})")
    return 0


def make_judge(args: argparse.Namespace) -> Any:
    """The judge of --judge MODEL (None without it); --rubric or a model flag without --judge is refused."""
    from agentcompass.core.errors import UserError

    if args.judge is None:
        given = [flag for flag, value in (("--rubric", args.rubric), ("--model-base-url", args.model_base_url),
                                          ("--model-api-key", args.model_api_key),
                                          ("--model-api-key-file", args.model_api_key_file)) if value is not None]
        if given:
            raise UserError(f"analyze: {given[0]} sets up the judge, which only --judge MODEL runs; add --judge MODEL "
                            f"(a preset or provider/model) or leave {given[0]} out")
        return None
    from agentcompass.analyze.analysis import Judge
    from agentcompass.analyze.judge import load_rubric
    from agentcompass.commands.analyze_judge import completer, judge_model

    rubric, text = load_rubric(args.rubric)
    model = judge_model(args)
    return Judge(completer(model, args.model_check is not False), rubric, text, model.name)


def print_judge(summary: dict[str, Any]) -> None:
    """The judge's lines for one setup: its cost, each criterion's outcomes, one line per attempt it could not judge."""
    from agentcompass.core.scoring import usd

    judge = summary["judge"]
    cost = usd(judge["cost_usd"]) if judge["cost_known"] else "unknown (no price for the model)"
    checks = "; ".join(f"{name} " + " ".join(f"{k}={v}" for k, v in c.items()) for name, c in judge["checks"].items())
    print(f"{Path(summary['run_dir']).name}: judge {judge['model']}: {judge['attempts_judged']} attempt(s) "
          f"({judge['cached']} cached), {judge['tokens_in']} in / {judge['tokens_out']} out tokens, {cost}; {checks}")
    for error in judge["errors"]:
        print(f"  judge error: {error}")
    if judge.get("job_summary"):
        print(f"  job summary: {' '.join(judge['job_summary'].split())}")


def after_run(run_args: argparse.Namespace) -> Any:
    """`run --analyze [--analyze-judge MODEL]`: what runs when the run ends, `analyze` on its run directories with
    the run's own --config and --config-dir. The judge's model is checked now (one line, exit 2, before any trial),
    so a run is never paid for and then left unjudged."""
    overlays = [arg for path in run_args.config for arg in ("--config", str(path))]
    overlays += [arg for path in run_args.config_dir for arg in ("--config-dir", str(path))]
    judged = ["--judge", run_args.analyze_judge] if run_args.analyze_judge else []
    if judged:
        make_judge(build_parser().parse_args(["analyze", ".", *judged, *overlays]))  # the model's 1-token check

    def analyze_finished(run_dirs: list[Path]) -> None:
        from agentcompass.analyze.analysis import check_finished
        from agentcompass.core.errors import UserError

        finished = []
        for run_dir in run_dirs:
            try:
                check_finished(run_dir)
                finished.append(str(run_dir))
            except UserError as exc:  # a run stopped early: said, the others analyzed
                print(f"analyze: {exc}")
        if finished:  # the judge's model was checked before the run: not again
            checked = [*judged, "--no-model-check"] if judged else []
            handle(build_parser().parse_args(["analyze", *finished, *checked, *overlays]), [])
    return analyze_finished


def build_parser() -> argparse.ArgumentParser:
    """This command's own parser (not the CLI's, which imports this module), for `run --analyze`'s arguments."""
    parser = argparse.ArgumentParser(prog="agentcompass")
    register(parser.add_subparsers(dest="command"))
    return parser
