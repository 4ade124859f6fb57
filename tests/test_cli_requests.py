"""What the installed CLIs' requests look like once the gateway has set the tier: bodies the real APIs accept,
checked with the `anthropic` and `openai` SDKs' own request types (tests/api_requests.py).

The Claude Code bodies are what the pinned 2.1.332 really sent (recorded against a scripted endpoint, long
texts shortened): by default `thinking: {type: enabled, budget_tokens: 31999, display: updates}` with a
clear_thinking context edit; with MAX_THINKING_TOKENS=0 `thinking: {type: disabled}` and no edit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from agentcompass.gateway.server import upstream_of
from agentcompass.gateway.app import rewrite
from agentcompass.harnesses.claude_code import ClaudeCodeHarness
from agentcompass.core.schema import ModelConfig
from api_requests import problems

REPO = Path(__file__).resolve().parent.parent
RECORDED = json.loads((REPO / "tests/data/claude_code-2.1.332-requests.json").read_text())
# The SDK's types no longer list `temperature` (newer models refuse it); Claude Code 2.1.332 sends it only to
# models that take it, Sonnet 4.5 among them.
SONNET_TAKES = frozenset({"temperature"})


def preset(name: str, **changes) -> ModelConfig:
    fields = yaml.safe_load((REPO / f"conf/models/{name}.yaml").read_text())
    return ModelConfig(**{**fields, "api_key": "sk-test", **changes})


def test_the_recorded_bodies_are_what_the_messages_api_takes():
    """The check itself: the CLI's own bodies pass; the malformed thinking the gateway used to leave does not."""
    for body in RECORDED.values():
        assert problems("messages", body, beta=True, extensions=SONNET_TAKES) == []
    broken = {**RECORDED["default"], "thinking": {"display": "updates"}}
    assert any(p.startswith("thinking") for p in problems("messages", broken, beta=True))


@pytest.mark.parametrize("tier", ["none", "low", "high", "max"])
@pytest.mark.parametrize("sent", ["default", "MAX_THINKING_TOKENS=0"])
def test_claude_code_bodies_at_every_tier_are_valid_messages_requests(tier, sent):
    model = preset("claude-sonnet-4-5", reasoning=tier)
    body, _ = rewrite(RECORDED[sent], upstream_of(model), "messages")
    assert problems("messages", body, beta=True, extensions=SONNET_TAKES) == []
    wanted = model.reasoning_map[tier].get("thinking")
    if wanted is None:
        assert "thinking" not in body and "context_management" not in body
    else:
        assert {k: v for k, v in body["thinking"].items() if k != "display"} == wanted
        assert body["max_tokens"] == model.reasoning_map[tier]["max_tokens"]


@pytest.mark.parametrize(("tier", "expected"), [("none", "0"), ("low", "2048"), ("max", "31999"), (None, None)])
def test_claude_code_sends_the_tier_itself_without_the_gateway(tier, expected):
    """On modal/gcp the CLI calls the endpoint directly: its own setting carries the tier (unset, 2.1.332
    thinks with a 31,999-token budget whatever the tier)."""
    model = preset("claude-sonnet-4-5", reasoning=tier)
    env = ClaudeCodeHarness.cli_env(ClaudeCodeHarness.__new__(ClaudeCodeHarness), model,
                                    type("E", (), {"anthropic_base_url": "http://x", "api_key": "k"})())
    assert env.get("MAX_THINKING_TOKENS") == expected
