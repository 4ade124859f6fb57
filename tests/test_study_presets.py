"""A preset for every setup of the cost benchmark's three published studies (deepswe33-glm-opus48,
deepswe33-kimi-k3, deepswe33-opus5), with the tier each setup ran and its price.

The expected request fields are what the study's own reasoning proxy injected per setup (its run_deepswe.py
SETUPS and reasoning_proxy.py tiers, read from the benchmark's repository), written out by hand here: GLM's tiers
go in chat_template_kwargs, Kimi's as a top-level reasoning_effort, and each model's default tier sends nothing.
"""

from __future__ import annotations

import pytest
import yaml

from agentcompass.core.models import Meter, cli_model_name, request_fields
from conftest import REPO
from test_models import model_for, reply

# (study setup, preset, the tier it ran, what the study's proxy added to each request)
STUDY_SETUPS = [
    ("glm-default", "glm-5.2", "max", {}),
    ("glm-high", "glm-5.2", "high", {"chat_template_kwargs": {"reasoning_effort": "high"}}),
    ("glm-nothink", "glm-5.2", "none", {"chat_template_kwargs": {"enable_thinking": False}}),
    ("k3", "kimi-k3", "max", {}),
    ("k3-high", "kimi-k3", "high", {"reasoning_effort": "high"}),
    ("k3-low", "kimi-k3", "low", {"reasoning_effort": "low"}),
]


@pytest.mark.parametrize(("setup", "preset", "tier", "fields"), STUDY_SETUPS, ids=[s[0] for s in STUDY_SETUPS])
def test_each_self_hosted_setup_sends_what_the_study_sent(setup, preset, tier, fields):
    assert request_fields(model_for(preset, f"model.reasoning={tier}")) == fields


def test_the_default_tiers_are_the_studies_defaults():
    # glm-default and k3 hit the endpoint with no tier; opus and opus5 ran Claude Code with its own default
    # thinking budget (31,999 tokens).
    assert model_for("glm-5.2").reasoning == "max" and model_for("kimi-k3").reasoning == "max"
    for preset in ("claude-opus-4-8", "claude-opus-5"):
        thinking = request_fields(model_for(preset))["thinking"]
        assert thinking == {"type": "enabled", "budget_tokens": 31999}


@pytest.mark.parametrize(("preset", "model_id"), [("claude-opus-4-8", "claude-opus-4-8"), ("claude-opus-5", "claude-opus-5")])
def test_the_opus_setups_are_priced_per_token_and_claude_code_runs_them(preset, model_id):
    model = model_for(preset)
    # Anthropic's list price for both: $5 per million input tokens, $25 per million output tokens.
    assert Meter(model).charge(reply(prompt=1_000_000, completion=0, model=model_id)) == pytest.approx(5.0)
    assert Meter(model).charge(reply(prompt=0, completion=1_000_000, model=model_id)) == pytest.approx(25.0)
    listed = yaml.safe_load((REPO / "harnesses" / "claude_code.yaml").read_text())["models"]
    assert listed[cli_model_name(model)] == ["none", "low", "medium", "high", "max"]


def test_the_self_hosted_rates_are_the_studies():
    # GLM: the benchmark's modeled 8xB200 rate (GPU_HOURLY_USD = 50.7); Kimi K3: its study's effective rate,
    # billing.json's cost over its window ($1,068.419 over 8.344 h).
    assert model_for("glm-5.2").pricing.hourly_usd == 50.7
    assert model_for("kimi-k3").pricing.hourly_usd == pytest.approx(1068.419 / 8.344, abs=0.01)
