"""`agentcompass list tasks BENCHMARK`: the task ids a run of BENCHMARK would select.

The benchmark is composed as `run` composes it (recipe, user config dirs, --benchmark-params,
--config overlays) and its task format loads the tasks, so filters, limit and shuffle apply exactly
as they would in the run. Nothing is written."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

SELECTION_HARNESS = "nop"  # any harness that needs no model: only the benchmark matters here


def selected_ids(args: argparse.Namespace) -> list[str]:
    from agentcompass.commands.args import build_invocation
    from agentcompass.core.config import compose, finalize, make_hydra
    from agentcompass.core.registry import resolve

    flags = argparse.Namespace(**{**vars(args), "harness_params": None, "env_params": None, "model_params": None,
                                  "model_base_url": None, "model_api_key": None})
    invocation = build_invocation(flags, [args.benchmark, SELECTION_HARNESS, "none"], [])
    invocation.writes_results = False
    resolved = finalize(compose(make_hydra(invocation.roots()), invocation.overrides), invocation)
    recipe = resolved.benchmark
    return [task.id for task in resolve("format", recipe.format)(recipe).load()]


def print_tasks(args: argparse.Namespace) -> int:
    from agentcompass.core.errors import UserError

    if not args.benchmark:
        raise UserError("list tasks needs a BENCHMARK, e.g. agentcompass list tasks demo "
                        "(agentcompass list benchmarks lists them)")
    ids = selected_ids(args)
    if args.json:
        print(json.dumps({"benchmark": args.benchmark, "count": len(ids), "ids": ids}, indent=2))
    else:
        for task_id in ids:
            print(task_id)
        print(f"{args.benchmark}: {len(ids)} task{'s' if len(ids) != 1 else ''} selected", file=sys.stderr)
    return 0


def add_arguments(parser: Any) -> None:
    """`list`'s flags for `list tasks` (the other groups ignore them)."""
    parser.add_argument("--benchmark-params", metavar="JSON",
                        help="with tasks: deep-merged into benchmark.params (sample_ids, filter, limit, shuffle, seed, ...)")
    parser.add_argument("--json", action="store_true", help="with tasks: print {benchmark, count, ids} as JSON")
    parser.add_argument("--env", default=None, help="with tasks: the env whose recipe overrides apply (default local)")
    parser.add_argument("--config", action="append", default=[], type=Path, metavar="FILE",
                        help="with tasks: private YAML overlay, highest precedence (repeatable)")
