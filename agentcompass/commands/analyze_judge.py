"""`analyze --judge MODEL`: the judge's model resolved exactly as `run` resolves its MODEL (presets, a
provider/model string, --model-base-url, the key from --model-api-key(-file), a private --config or the
provider's variable, --config-dir), checked with the same 1-token request, and called through litellm with the
run's meter, so every judge call is priced as an agent's call would be. analyze/judge.py gets only the callable."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentcompass.analyze.judge import Complete, Reply

if TYPE_CHECKING:
    from agentcompass.core.schema import ModelConfig

JUDGE_RETRIES = 2  # litellm's own retries of a failed call (a 429, a 5xx) before it is the attempt's error


def add_judge_args(parser: argparse.ArgumentParser) -> None:
    from agentcompass.commands.args import add_overlay_args

    parser.add_argument("--judge", metavar="MODEL",
                        help="also judge each attempt with this model (a preset or provider/model, as for run) "
                             "against the rubric; priced, cached per attempt")
    parser.add_argument("--rubric", type=Path, metavar="FILE",
                        help="the judge's rubric (YAML; default: agentcompass/analyze/rubric.yaml)")
    parser.add_argument("--model-base-url", metavar="URL", help="the judge model's endpoint base URL")
    parser.add_argument("--model-api-key", metavar="KEY",
                        help="the judge model's API key (never written anywhere; prefer --model-api-key-file)")
    parser.add_argument("--model-api-key-file", metavar="FILE", help="read the judge model's API key from FILE ('-': stdin)")
    parser.add_argument("--no-model-check", dest="model_check", action="store_false", default=None,
                        help="skip the 1-token request to the judge's model before the first attempt")
    add_overlay_args(parser)


def judge_model(args: argparse.Namespace) -> "ModelConfig":
    """The judge's model config, composed as `run demo nop MODEL` would compose its model (nothing is run)."""
    from agentcompass.commands.args import build_invocation
    from agentcompass.core.config import compose, finalize, make_hydra

    words = argparse.Namespace(**{**vars(args), "env": None, "benchmark_params": None, "harness_params": None,
                                  "env_params": None, "model_params": None})
    invocation = build_invocation(words, ["demo", "nop", args.judge], [])
    invocation.writes_results = False
    return finalize(compose(make_hydra(invocation.roots()), invocation.overrides), invocation).model


def completer(model: "ModelConfig", check: bool = True) -> Complete:
    """One judge call: litellm with the preset's arguments and timeouts, counted by the run's Meter."""
    from agentcompass.core.models import (Meter, check_model, completion_kwargs, import_litellm, litellm_name,
                                          request_timeout, token_counts)

    check_model(model, request=check)  # a missing or refused key, an unreachable endpoint: one line, exit 2, before any attempt
    litellm = import_litellm()
    meter = Meter(model)
    kwargs: dict[str, Any] = completion_kwargs(model)

    def complete(messages: list[dict[str, str]]) -> Reply:
        started = time.monotonic()
        try:
            response = litellm.completion(model=litellm_name(model), messages=messages, timeout=request_timeout(model),
                                          num_retries=JUDGE_RETRIES, drop_params=True, **kwargs)
        except Exception:
            meter.failed()
            raise
        finally:
            meter.waited(time.monotonic() - started)
        known_before = meter.usage.cost_known
        cost = meter.charge(response)
        tokens_in, tokens_out, _cached = token_counts(response)
        text = response.choices[0].message.content or ""
        return Reply(text, tokens_in, tokens_out, cost, known_before and meter.usage.cost_known)

    return complete
