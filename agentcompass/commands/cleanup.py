"""`agentcompass cleanup --env docker|podman|modal|gcp [--run-name NAME]`: remove what a killed run left behind.

A run closes its sandboxes on success, failure, Ctrl-C and SIGTERM; only a SIGKILL (or a
crash of the machine) leaves them. Providers that can find their leftovers by label
implement `cleanup(run_name) -> int`.
"""

from __future__ import annotations

import argparse
from typing import Any

from agentcompass.core.errors import UserError

CLEANABLE = ("docker", "podman", "modal", "gcp")  # the shipped providers whose leftovers `cleanup` finds by label


def register(subparsers: Any) -> None:
    from agentcompass.commands.args import add_overlay_args

    parser = subparsers.add_parser("cleanup", help="remove sandboxes an earlier run left behind (e.g. after kill -9)")
    parser.add_argument("--env", default="docker", help=f"execution environment to clean up: {', '.join(CLEANABLE)} "
                                                         f"(default docker)")
    parser.add_argument("--run-name", metavar="NAME", help="only this run's sandboxes (default: every agentcompass sandbox)")
    parser.add_argument("--env-params", metavar="JSON", help="deep-merged into env, as for run")
    add_overlay_args(parser)  # the provider's settings and credentials come as they do for `run`
    parser.set_defaults(benchmark_params=None, harness_params=None, model_params=None, model_api_key=None,
                        model_base_url=None)


def handle(args: argparse.Namespace, argv: list[str]) -> int:
    from agentcompass.commands.args import build_invocation
    from agentcompass.core.config import compose, finalize, make_hydra
    from agentcompass.core.registry import resolve

    # Compose as `run` would (any benchmark will do), so environments.<env> from a private --config applies.
    invocation = build_invocation(args, ["demo", "nop", "none"], [])
    invocation.writes_results = False  # cleanup writes no results
    env = finalize(compose(make_hydra(invocation.roots()), invocation.overrides), invocation).env
    provider = resolve("provider", env.impl or env.name)(**dict(env.model_extra or {}))
    cleanup = getattr(provider, "cleanup", None)
    if cleanup is None:
        raise UserError(f"provider '{args.env}' leaves nothing behind to clean up; cleanup supports: {', '.join(CLEANABLE)}")
    removed = cleanup(args.run_name)
    scope = f" of run '{args.run_name}'" if args.run_name else ""
    print(f"removed {removed} {args.env} sandbox(es){scope}")
    return 0
