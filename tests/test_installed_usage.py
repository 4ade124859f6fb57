"""What an installed CLI's trial costs: its tokens x the model's price, the same way for opencode, claude_code and
codex, through the gateway (each metered call) or without it (the CLI's own token counts); the CLI's own cost
figure, where it gives one, kept beside (`cli_cost_usd`) and the difference in the summary."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import yaml

from agentcompass.gateway.server import Gateway
from agentcompass.harnesses.claude_code import ClaudeCodeHarness
from agentcompass.harnesses.codex import CodexHarness
from agentcompass.harnesses.installed import gateway_usage, priced
from agentcompass.harnesses.opencode import OpencodeHarness
from agentcompass.core.models import import_litellm
from agentcompass.providers.local.provider import LocalProvider
from agentcompass.core.scoring import cli_cost
from agentcompass.core.sandbox import SandboxSpec
from agentcompass.core.schema import GatewaySettings, ModelConfig
from agentcompass.core.context import TrialContext
from gateway_upstream import KEY, ScriptedUpstream, serving

REPO = Path(__file__).resolve().parent.parent


def preset(name: str, **changes) -> ModelConfig:
    return ModelConfig(**{**yaml.safe_load((REPO / f"conf/models/{name}.yaml").read_text()), **changes})


def price(name: str, tokens_in: int, tokens_out: int, read: int = 0, written: int = 0) -> float:
    """From litellm's bundled map itself, not through agentcompass's pricing."""
    p = import_litellm().model_cost[name]
    return ((tokens_in - read - written) * p["input_cost_per_token"] + read * p["cache_read_input_token_cost"]
            + written * p.get("cache_creation_input_token_cost", p["input_cost_per_token"])
            + tokens_out * p["output_cost_per_token"])


def bare(harness_cls):  # the harness without its bundle: only read_usage is used
    return harness_cls.__new__(harness_cls)


CODEX_STDOUT = "\n".join(json.dumps(e) for e in [
    {"type": "thread.started", "thread_id": "t"},
    {"type": "item.completed", "item": {"type": "command_execution", "command": "ls"}},
    {"type": "turn.completed", "usage": {"input_tokens": 2400, "cached_input_tokens": 1024, "output_tokens": 310,
                                         "reasoning_output_tokens": 90}}])


def test_codex_through_the_gateway_costs_its_metered_tokens_times_the_price(tmp_path):
    """codex reports no cost: the run said cost 0.0, cost_known false, while the gateway had metered every call."""
    script = ScriptedUpstream()
    with serving(script) as url, Gateway(preset("gpt-5.5", base_url=f"{url}/v1", api_key=KEY), "t", GatewaySettings()) as gw:
        sandbox = LocalProvider(isolation="none").open(SandboxSpec(name="usage-codex", workdir="/app"))
        try:
            (tmp_path / "t").mkdir()
            endpoint = gw.endpoint(TrialContext("t", 1, tmp_path / "t", "t"), sandbox)
            for _ in range(2):
                httpx.post(f"{endpoint.openai_base_url}/responses", json={"input": "hi"}, timeout=60,
                           headers={"authorization": f"Bearer {endpoint.api_key}"}).raise_for_status()
            usage = gateway_usage(endpoint.usage(), bare(CodexHarness).read_usage(CODEX_STDOUT))
        finally:
            sandbox.close()
    expected = sum(price("gpt-5.5", u["input_tokens"], u["output_tokens"], u["input_tokens_details"]["cached_tokens"])
                   for u in script.usages)
    assert usage.cost_known and usage.cost_usd == pytest.approx(expected, rel=1e-9) and expected > 0
    assert usage.cli_cost_usd is None and usage.model_calls == 2


def test_codex_without_the_gateway_costs_its_own_tokens_times_the_price():
    usage = priced(bare(CodexHarness).read_usage(CODEX_STDOUT), preset("gpt-5.5"))
    assert usage.cost_known and usage.cost_usd == pytest.approx(price("gpt-5.5", 2400, 400, 1024), rel=1e-9)


def test_claude_code_and_opencode_are_priced_alike_their_own_figures_kept_beside():
    result = {"type": "result", "num_turns": 3, "total_cost_usd": 0.5, "duration_api_ms": 4000,
              "usage": {"input_tokens": 300, "cache_read_input_tokens": 5000, "cache_creation_input_tokens": 2000,
                        "output_tokens": 700}}
    sonnet = preset("claude-sonnet-4-5")
    claude = priced(bare(ClaudeCodeHarness).read_usage(json.dumps(result)), sonnet)
    expected = price("claude-sonnet-4-5-20250929", 7300, 700, 5000, 2000)
    assert claude.cost_usd == pytest.approx(expected, rel=1e-9) and claude.cli_cost_usd == 0.5
    assert claude.tokens_cache_write == 2000
    step = {"type": "step_finish", "part": {"cost": 0.25, "tokens": {"input": 300, "output": 600, "reasoning": 100,
                                                                      "cache": {"read": 5000, "write": 2000}}}}
    opencode = priced(bare(OpencodeHarness).read_usage(json.dumps(step)), sonnet)
    assert opencode.cost_usd == pytest.approx(expected, rel=1e-9) and opencode.cli_cost_usd == 0.25
    assert cli_cost(claude + opencode) == {"cli_cost_usd": 0.75,
                                           "cli_cost_difference_usd": pytest.approx(0.75 - 2 * expected, abs=1e-6)}
