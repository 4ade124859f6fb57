"""`agentcompass endpoint up|status|down PRESET --env modal`: the preset's own self-hosted endpoint."""

from __future__ import annotations

import argparse
from typing import Any

from agentcompass.core.errors import UserError

ACTIONS = ("up", "status", "down")
SERVED_ON = ("modal",)  # the envs that can serve an endpoint
EXAMPLES = """examples:
  agentcompass endpoint up glm-5.2 --env modal --config ~/secrets.yaml
  agentcompass endpoint status glm-5.2 --env modal
  agentcompass run deepswe_cost33 opencode glm-5.2 --model-base-url modal:glm-5-2 --config ~/secrets.yaml
  agentcompass endpoint down glm-5.2 --env modal
"""


def register(sub: Any) -> None:
    from agentcompass.commands.args import add_overlay_args, positive_float

    parser = sub.add_parser("endpoint", help="bring a preset's self-hosted endpoint up, see it, take it down",
                            epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=ACTIONS, help="up: create it unless it exists and wait until it is live; "
                        "status: whether it is up and its cost per hour; down: stop it")
    parser.add_argument("preset", metavar="PRESET", help="a model preset with an endpoint: block (e.g. glm-5.2)")
    parser.add_argument("--env", default="modal", help="where it is served: modal (the default and only one)")
    parser.add_argument("--wait-s", type=positive_float, default=1800.0, metavar="S",
                        help="up: how long to wait for it to be live (default 1800: a cold start on 8 GPUs takes minutes)")
    parser.add_argument("--poll-s", type=positive_float, default=15.0, metavar="S",
                        help="up: how often to ask Modal for the status while waiting (default 15)")
    add_overlay_args(parser)  # credentials and the preset's endpoint settings, as for `run`
    parser.set_defaults(benchmark_params=None, harness_params=None, model_params=None, model_api_key=None,
                        model_base_url=None, env_params=None)


def handle(args: argparse.Namespace, argv: list[str]) -> int:
    from agentcompass.commands.args import build_invocation
    from agentcompass.core.config import compose, finalize, make_hydra
    from agentcompass.endpoints import lifecycle

    if args.env not in SERVED_ON:
        raise UserError(f"endpoint: --env {args.env} cannot serve an endpoint; allowed: {', '.join(SERVED_ON)}")
    # Composed as `run` composes it (any benchmark will do): the preset with a private --config's model: and
    # environments.modal (credentials, environment) applied.
    invocation = build_invocation(args, ["demo", "nop", args.preset], [])
    invocation.writes_results = False
    composed = compose(make_hydra(invocation.roots()), invocation.overrides)
    resolved = finalize(composed, invocation)
    spec = lifecycle.spec_of(resolved.model, args.preset)
    api = lifecycle.connect(dict(resolved.env.model_extra or {}), spec.environment)
    if args.action == "up":
        return lifecycle.up(resolved.model, args.preset, api, args.wait_s, args.poll_s)
    if args.action == "status":
        return lifecycle.status(resolved.model, args.preset, api)
    return lifecycle.down(resolved.model, args.preset, api)
