"""`agentcompass regrade RUN_DIR`: grade a finished run's attempts again, without their agents (docs/regrade.md)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

EXAMPLES = """examples:
  agentcompass regrade results/r1/demo__mini_swe_agent__gpt-5__docker
  agentcompass regrade results/r1/demo__mini_swe_agent__gpt-5__docker --verifier-from fixed-tasks/ --run-name r1-fixed
  agentcompass report results/r1 results/r1-fixed              # the verdicts that flipped
"""


def register(sub: Any) -> None:
    parser = sub.add_parser("regrade", help="grade a finished run's attempts again from their kept state (no agent)",
                            epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR",
                        help="a finished run's folder: results/<run name>/<benchmark>__<harness>__<model>__<env>")
    parser.add_argument("--tasks", nargs="+", metavar="ID", help="only these tasks (default: every attempted task)")
    parser.add_argument("--verifier-from", type=Path, metavar="TASKS_DIR",
                        help="changed task folders (Harbor, Terminal-Bench) whose tests replace the original's")
    parser.add_argument("--run-name", metavar="NEW", help="the new run's name (default: <original run name>-regrade); "
                        "reuse it to resume")
    parser.add_argument("--task-concurrency", type=int, metavar="N", help="attempts graded at once (default: the run's)")


def handle(args: argparse.Namespace, argv: list[str]) -> int:
    from agentcompass.core.errors import UserError
    from agentcompass.core.run_summary import print_summary
    from agentcompass.core.runner import execute
    from agentcompass.regrade.plan import prepare_regrade

    if args.task_concurrency is not None and args.task_concurrency < 1:
        raise UserError(f"--task-concurrency {args.task_concurrency}: must be 1 or more")
    tasks = [t for item in args.tasks or [] for t in item.split(",") if t]
    prepared = prepare_regrade(args.run_dir, tasks or None, args.verifier_from, args.run_name)
    if args.task_concurrency:
        prepared.resolved.run.task_concurrency = args.task_concurrency
    summary = execute(prepared, ["regrade", *argv[1:]])
    print_summary(summary, prepared.run_dir)
    print(f"regraded {args.run_dir} -> {prepared.run_dir}; the verdicts that flipped: agentcompass report "
          f"{args.run_dir.parent} {prepared.run_dir.parent}")
    return 0
