"""`agentcompass analyze RUN...`: every attempt of finished runs through the rule detectors and the
failure taxonomy (docs/analyze.md); writes analysis.jsonl and analysis.json in each run and prints a
table of flags and failure modes per setup."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

EXAMPLES = """examples:
  agentcompass analyze results/nightly                         # every setup of a run name
  agentcompass analyze results/nightly/demo__nop__none__local  # one setup
  agentcompass analyze results/nightly --flagged-as failed     # and the rates with flagged passes failed
"""


def register(sub: Any) -> None:
    parser = sub.add_parser("analyze", help="flag attempts that may have cheated; name why each failed attempt failed",
                            epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, metavar="RUN",
                        help="a run directory, a run name holding several (a sweep), or a results root")
    parser.add_argument("--flagged-as", choices=["failed"], metavar="failed",
                        help="also write summary.flagged-as-failed.json: the run's rates with every flagged pass "
                             "scored as a failure (the run's own trials.jsonl and summary.json are left as they are)")


def handle(args: argparse.Namespace, argv: list[str]) -> int:
    from agentcompass.analyze.analysis import analyze_run, check_finished, run_dirs

    dirs = [d for path in args.runs for d in run_dirs(path)]
    for d in dirs:  # every path checked before anything is written
        check_finished(d)
    summaries = [analyze_run(d) for d in dirs]
    print(f"{'setup':<48} {'attempts':>8} {'passed':>6} {'flagged':>7} {'passed+clean':>12}  flags / failure modes")
    for s in summaries:
        flags = " ".join(f"{k}={v}" for k, v in s["flags"].items()) or "-"
        modes = " ".join(f"{k}={v}" for k, v in s["failure_modes"].items()) or "-"
        print(f"{Path(s['run_dir']).name:<48} {s['attempts']:>8} {s['passed']:>6} {s['flagged']:>7} "
              f"{s['passed_not_flagged']:>12}  flags: {flags} | failures: {modes}")
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
