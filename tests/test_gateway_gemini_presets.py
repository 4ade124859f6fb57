"""The Gemini, Qwen-Coder and Kimi presets: each routes where its comment says (the gateway's upstream, litellm's
provider), each is priced as litellm's bundled price file prices it, a Gemini tier reaches the endpoint through
litellm too, and the 1-token check asks a Gemini endpoint in its own API (a wrong key is one line)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from fake_llm_server import FakeLLM, FakeLLMServer
from gateway_upstream import KEY
from agentcompass.core.errors import UserError
from agentcompass.core.models import check_model, completion_kwargs, import_litellm, token_counts, tokens_price
from agentcompass.core.schema import ModelConfig
from agentcompass.gateway.server import upstream_of

REPO = Path(__file__).resolve().parent.parent
PRESETS = REPO / "conf/models"
# preset -> (the gateway's upstream shape, its base URL, the model the endpoint is asked for)
ROUTES = {
    "gemini-2.5-flash": ("gemini", "https://generativelanguage.googleapis.com", "gemini-2.5-flash"),
    "gemini-2.5-pro": ("gemini", "https://generativelanguage.googleapis.com", "gemini-2.5-pro"),
    "gemini-3.1-pro-preview": ("gemini", "https://generativelanguage.googleapis.com", "gemini-3.1-pro-preview"),
    "qwen3-coder-plus": ("openai", "https://dashscope-intl.aliyuncs.com/compatible-mode/v1", "qwen3-coder-plus"),
    "qwen3-coder": ("openai", "http://localhost:8000/v1", "Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8"),
    "kimi-k2.6": ("openai", "https://api.moonshot.ai/v1", "kimi-k2.6"),
    "kimi-k2.6-anthropic": ("anthropic", "https://api.moonshot.ai/anthropic", "kimi-k2.6"),
    "kimi-k2": ("openai", "http://localhost:8000/v1", "moonshotai/Kimi-K2-Instruct-0905"),
}
# preset -> the entry of litellm's bundled price file its prices come from (None: billed by the hour)
PRICE_ENTRIES = {"gemini-2.5-flash": "gemini/gemini-2.5-flash", "gemini-2.5-pro": "gemini/gemini-2.5-pro",
                 "gemini-3.1-pro-preview": "gemini/gemini-3.1-pro-preview", "qwen3-coder-plus": "dashscope/qwen3-coder-plus",
                 "kimi-k2.6": "moonshot/kimi-k2.6", "kimi-k2.6-anthropic": "moonshot/kimi-k2.6",
                 "qwen3-coder": None, "kimi-k2": None}


def preset(name: str, **changes: object) -> ModelConfig:
    return ModelConfig(**{**yaml.safe_load((PRESETS / f"{name}.yaml").read_text()), **changes})


@pytest.mark.parametrize("name", sorted(ROUTES))
def test_each_preset_is_forwarded_where_its_comment_says(name):
    upstream = upstream_of(preset(name, api_key="k"))
    assert (upstream.shape, upstream.base_url, upstream.model) == ROUTES[name]


def price_file() -> dict[str, dict[str, object]]:
    litellm = import_litellm()
    return json.loads((Path(litellm.__file__).parent / "model_prices_and_context_window_backup.json").read_text())


def test_each_preset_costs_what_litellms_price_file_says():
    """100k prompt tokens (10k of them cache reads) and 2k out, priced from the file's own figures: a flat entry
    by its per-token prices, a stepped one (tiered_pricing, above_200k) at its step for a 100k prompt."""
    prices = price_file()
    for name, entry in PRICE_ENTRIES.items():
        cost, known = tokens_price(preset(name), 100_000, 2_000, 10_000)
        if entry is None:
            assert not known, name  # self-hosted: the hour's rate, which the user sets
            continue
        figures = prices[entry]
        step = next((t for t in figures.get("tiered_pricing", []) if t["range"][0] <= 100_000 < t["range"][1]), figures)
        expected = (90_000 * step["input_cost_per_token"] + 10_000 * step["cache_read_input_token_cost"]
                    + 2_000 * step["output_cost_per_token"])
        assert known and cost == pytest.approx(expected), name


@pytest.mark.parametrize("tier, sent", [("none", {"thinkingBudget": 0}), ("high", {"thinkingBudget": 24576}),
                                        ("dynamic", {"thinkingBudget": -1})])
def test_a_gemini_tier_reaches_the_endpoint_through_litellm(tier, sent):
    llm = FakeLLM(commands=["echo hi"], api_key=KEY)
    with FakeLLMServer(llm) as server:
        model = preset("gemini-2.5-flash", reasoning=tier, base_url=f"http://127.0.0.1:{server.port}", api_key=KEY)
        tool = {"type": "function", "function": {"name": "bash", "parameters": {
            "type": "object", "properties": {"command": {"type": "string"}}}}}
        turns = [{"role": "user", "content": "go"}, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "on"}]
        reply = import_litellm().completion(model="gemini/gemini-2.5-flash", messages=turns, tools=[tool], max_retries=0,
                                            **completion_kwargs(model))
    assert json.loads(reply.choices[0].message.tool_calls[0].function.arguments) == {"command": "echo hi"}
    usage = llm.requests[0].usage  # thoughts are output, the cached part of the prompt is cached, as the gateway counts
    cached = usage["prompt_tokens_details"]["cached_tokens"]
    assert cached > 0 and token_counts(reply) == (usage["prompt_tokens"], usage["completion_tokens"], cached)
    thinking = llm.requests[0].body["generationConfig"]["thinkingConfig"]
    assert {k: v for k, v in thinking.items() if k != "includeThoughts"} == sent


def test_the_model_check_asks_a_gemini_endpoint_in_its_api_and_a_wrong_key_is_one_line():
    llm = FakeLLM(commands=["echo hi"], api_key=KEY)
    with FakeLLMServer(llm) as server:
        base = f"http://127.0.0.1:{server.port}"
        check_model(preset("gemini-2.5-pro", base_url=base, api_key=KEY))
        with pytest.raises(UserError, match="rejected the API key for 'gemini/gemini-2.5-pro'") as refused:
            check_model(preset("gemini-2.5-pro", base_url=base, api_key="wrong-key"))
    assert "wrong-key" not in str(refused.value) and "\n" not in str(refused.value)
    assert [(r.api, r.status, r.authorization) for r in llm.checks] == [("gemini", 200, f"Bearer {KEY}"),
                                                                       ("gemini", 401, "Bearer wrong-key")]
    assert llm.checks[0].body == {"contents": [{"role": "user", "parts": [{"text": "Reply with OK."}]}],
                                  "generationConfig": {"maxOutputTokens": 1}}
