"""The model layer: presets, reasoning tiers, API key precedence and pricing (in process, no network)."""

from __future__ import annotations

import pytest

from agentcompass.core.config import GROUPS, Invocation, compose, finalize, make_hydra, public_dict
from agentcompass.core.errors import UserError
from agentcompass.core.models import Meter, api_key, completion_kwargs, import_litellm, litellm_name, request_fields
from agentcompass.core.schema import ModelConfig, Pricing, ResolvedConfig


def resolved_for(preset: str, *extra: str, config_files=(), cli_key: str | None = None) -> ResolvedConfig:
    overrides = [f"{GROUPS['benchmark'][1]}=demo", f"{GROUPS['harness'][1]}=mini_swe_agent",
                 f"{GROUPS['model'][1]}={preset}", f"{GROUPS['env'][1]}=local", *extra]
    invocation = Invocation(overrides, list(config_files), [], cli_key)
    return finalize(compose(make_hydra(invocation.roots()), overrides), invocation)


def model_for(preset: str, *extra: str, config_files=(), cli_key: str | None = None) -> ModelConfig:
    return resolved_for(preset, *extra, config_files=config_files, cli_key=cli_key).model


def reply(prompt: int, completion: int, cached: int = 0, model: str = "gpt-5-mini"):
    litellm = import_litellm()
    return litellm.ModelResponse(
        model=model,
        choices=[{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "ok"}}],
        usage={"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
               "prompt_tokens_details": {"cached_tokens": cached}},
    )


@pytest.mark.parametrize("tier, fields", [
    ("none", {"chat_template_kwargs": {"enable_thinking": False}}),
    ("high", {"chat_template_kwargs": {"reasoning_effort": "high"}}),
    ("max", {}),
])
def test_glm_tiers_map_to_request_fields(tier, fields):
    model = model_for("glm-5.2", f"model.reasoning={tier}")
    assert request_fields(model) == fields
    kwargs = completion_kwargs(model, environ={})
    assert {k: kwargs[k] for k in fields} == fields
    assert litellm_name(model) == "openai/zai-org/GLM-5.2-FP8"


def test_the_default_glm_tier_is_the_servers_default():
    assert model_for("glm-5.2").reasoning == "max"


def test_openai_and_anthropic_tiers():
    assert request_fields(model_for("gpt-5-mini", "model.reasoning=high")) == {"reasoning_effort": "high"}
    thinking = request_fields(model_for("claude-sonnet-4-5", "model.reasoning=medium"))
    assert thinking == {"thinking": {"type": "enabled", "budget_tokens": 8192}, "max_tokens": 32000}
    # A provider/model string with a tier but no map: litellm's portable reasoning_effort.
    custom = model_for("custom", "model.name=openai/gpt-4o-mini", "++model.reasoning=low")
    assert request_fields(custom) == {"reasoning_effort": "low"}


def test_an_unknown_tier_fails_at_composition_without_echoing_the_key():
    with pytest.raises(UserError) as caught:
        model_for("glm-5.2", "model.reasoning=hgh", cli_key="sk-never-echo")
    assert "'hgh' is not one of this model's tiers (none, high, max)" in str(caught.value)
    assert "sk-never-echo" not in str(caught.value)


def test_key_precedence_cli_then_private_config_then_environment(tmp_path, monkeypatch):
    private = tmp_path / "private.yaml"
    private.write_text("model:\n  api_key: ${oc.env:MY_PRIVATE_KEY}\n")
    monkeypatch.setenv("MY_PRIVATE_KEY", "from-config")
    environ = {"OPENAI_API_KEY": "from-env"}
    assert api_key(model_for("gpt-5-mini", config_files=[private], cli_key="from-cli"), environ) == "from-cli"
    assert api_key(model_for("gpt-5-mini", config_files=[private]), environ) == "from-config"
    assert api_key(model_for("gpt-5-mini"), environ) == "from-env"
    assert api_key(model_for("claude-sonnet-4-5"), {"ANTHROPIC_API_KEY": "anthropic-env"}) == "anthropic-env"
    assert api_key(model_for("gpt-5-mini"), {}) is None


def test_the_key_is_redacted_from_the_recorded_config():
    model = model_for("glm-5.2", cli_key="sk-secret-value")
    assert completion_kwargs(model, environ={})["api_key"] == "sk-secret-value"
    assert "sk-secret-value" not in str(public_dict(resolved_for("glm-5.2", cli_key="sk-secret-value")))


def test_a_keyless_self_hosted_endpoint_gets_a_placeholder_key():
    assert completion_kwargs(model_for("glm-5.2"), environ={})["api_key"] == "EMPTY"


def test_per_million_token_prices_with_cached_input():
    model = ModelConfig(name="openai/x", pricing=Pricing(input_per_mtok=2.0, output_per_mtok=8.0, cached_per_mtok=0.5))
    meter = Meter(model)
    cost = meter.charge(reply(prompt=10_000, completion=1_000, cached=4_000))
    # 6,000 uncached input at $2/M, 4,000 cached at $0.5/M, 1,000 output at $8/M.
    assert cost == pytest.approx(0.012 + 0.002 + 0.008)
    assert (meter.usage.tokens_in, meter.usage.tokens_out, meter.usage.tokens_cached) == (10_000, 1_000, 4_000)


def test_hourly_pricing_charges_the_time_spent_waiting():
    meter = Meter(ModelConfig(name="openai/glm", pricing=Pricing(hourly_usd=50.7)))
    meter.waited(1800.0)  # a failed request still occupied the endpoint
    meter.waited(900.0)
    assert meter.charge(reply(100, 10)) == pytest.approx(50.7 * 0.75)
    meter.waited(360.0)
    assert meter.charge(reply(100, 10)) == pytest.approx(50.7 * 0.1)
    assert meter.usage.generation_s == pytest.approx(3060.0)
    assert meter.usage.cost_known


def test_litellm_prices_a_known_model_from_its_bundled_map():
    litellm = import_litellm()
    entry = litellm.model_cost["gpt-5-mini"]
    meter = Meter(model_for("gpt-5-mini"))
    cost = meter.charge(reply(prompt=20_000, completion=3_000, cached=0))
    assert cost == pytest.approx(20_000 * entry["input_cost_per_token"] + 3_000 * entry["output_cost_per_token"])
    assert meter.usage.cost_known


def test_an_unpriced_model_costs_zero_and_is_marked_unknown():
    meter = Meter(ModelConfig(name="openai/no-such-model-anywhere"))
    assert meter.charge(reply(500, 50, model="no-such-model-anywhere")) == 0.0
    assert meter.usage.cost_known is False and meter.usage.model_calls == 1


def test_the_generic_preset_asks_for_its_name_and_endpoint():
    with pytest.raises(UserError, match="model.name is not set"):
        model_for("openai_compatible")
    with pytest.raises(UserError, match="--model-base-url"):
        model_for("openai_compatible", "model.name=my-model")
    model = model_for("openai_compatible", "model.name=my-model", "model.base_url=http://127.0.0.1:9/v1")
    assert litellm_name(model) == "openai/my-model"


def test_the_claude_preset_sends_max_tokens_only_with_thinking():
    """mini-swe-agent sends no max_tokens (litellm's default); a thinking budget needs a larger max_tokens."""
    assert "max_tokens" not in completion_kwargs(model_for("claude-sonnet-4-5"), environ={"ANTHROPIC_API_KEY": "k"})
    for tier in ("low", "medium", "high"):
        kwargs = completion_kwargs(model_for("claude-sonnet-4-5", f"model.reasoning={tier}"), environ={})
        assert kwargs["max_tokens"] > kwargs["thinking"]["budget_tokens"]
