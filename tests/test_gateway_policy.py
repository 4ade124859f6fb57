"""The gateway's request policy: attack requests (real API requests, checked with the official SDKs' types) that must
not reach the upstream as sent, the shipped CLIs' own requests that must pass unchanged, and the addresses it
listens on. Real HTTP on 127.0.0.1 against a scripted upstream."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from agentcompass.core.sandbox import SandboxSpec
from agentcompass.gateway.policy import FIELDS, REFUSED_FIELDS
from agentcompass.providers.local.provider import LocalProvider
from api_requests import adapter, problems
from gateway_fixtures import CLAUDE, GLM, HELLO, REPO, connects, new_trial, own_addresses, post, start_gateway
from gateway_fixtures import stream_text
from gateway_upstream import ScriptedUpstream, serving
from gateway_fixtures import gateways, local_sandbox, sandbox, upstream  # noqa: F401 (fixtures)

GPT = {**GLM, "name": "openai/gpt-5.5", "pricing": None, "reasoning": None, "reasoning_map": {}}
RECORDED = {k: v for k, v in json.loads((REPO / "tests/data/gateway-cli-requests.json").read_text()).items()
            if k != "about"}


@pytest.fixture(scope="module")
def offline_gateways(tmp_path_factory):
    """One scripted upstream, one gateway per API shape and a trial of a task without internet on each, for every
    attack of the module (each attack checks that nothing reached the upstream, so they can share it)."""
    script = ScriptedUpstream()
    sandbox = LocalProvider(isolation="none").open(SandboxSpec(name=f"gwp-{uuid.uuid4().hex[:8]}", workdir="/app",
                                                               allow_internet=False))
    started = []
    with serving(script) as url:
        try:
            for preset in (GPT, CLAUDE):
                started.append(start_gateway(preset, url))
            trials = tmp_path_factory.mktemp("trials")
            yield script, {shape: gateway.endpoint(new_trial(trials, shape), sandbox)
                           for shape, gateway in zip(("openai", "anthropic"), started)}
        finally:
            for gateway in started:
                gateway.stop()
            sandbox.close()


def send(endpoint: Any, kind: str, body: dict[str, Any], query: str = "", **headers: str) -> Any:
    path = {"chat": "chat/completions", "responses": "responses", "messages": "messages"}[kind]
    base = endpoint.anthropic_base_url + "/v1" if kind == "messages" else endpoint.openai_base_url
    return post(f"{base}/{path}" + (f"?{query}" if query else ""), json=body,
                headers={"authorization": f"Bearer {endpoint.api_key}", **headers})


CHAT = {"model": "gpt-5.5", "messages": HELLO}
RESPONSES = {"model": "gpt-5.5", "input": "hi"}
MESSAGES = {"model": "claude-sonnet-4-5", "max_tokens": 1024, "messages": HELLO}
WEB_SEARCH = {"type": "web_search", "external_web_access": True}
# (name, kind, body, query, headers, what the refusal names): each a request the real API takes.
ATTACKS = [
    ("n=64", "chat", {**CHAT, "n": 64}, "", {}, "n=64"),
    ("service_tier priority", "chat", {**CHAT, "service_tier": "priority"}, "", {}, "service_tier 'priority'"),
    ("service_tier priority (responses)", "responses", {**RESPONSES, "service_tier": "priority"}, "", {}, "service_tier"),
    ("background", "responses", {**RESPONSES, "background": True}, "", {}, "background"),
    ("store", "chat", {**CHAT, "store": True}, "", {}, "store true"),
    ("previous_response_id", "responses", {**RESPONSES, "previous_response_id": "resp_1"}, "", {}, "previous_response_id"),
    ("query string", "chat", CHAT, "api-version=2099-01-01", {}, "query string"),
    ("query string (messages)", "messages", MESSAGES, "beta=true&x=1", {}, "query string"),
    ("anthropic-beta", "messages", MESSAGES, "", {"anthropic-beta": "context-1m-2025-08-07"}, "context-1m-2025-08-07"),
    ("an allowed and an arbitrary beta", "messages", MESSAGES, "beta=true",
     {"anthropic-beta": "claude-code-20250219,files-api-2025-04-14"}, "files-api-2025-04-14"),
    ("web_search tool", "responses", {**RESPONSES, "tools": [WEB_SEARCH]}, "", {}, "'web_search'"),
    ("code_interpreter tool", "responses", {**RESPONSES, "tools": [{"type": "code_interpreter",
                                                                     "container": {"type": "auto"}}]}, "", {}, "code_interpreter"),
    ("web_search_options", "chat", {**CHAT, "web_search_options": {}}, "", {}, "web_search_options"),
    ("web_fetch tool", "messages", {**MESSAGES, "tools": [{"type": "web_fetch_20250910", "name": "web_fetch"}]}, "",
     {"anthropic-beta": "web-fetch-2025-09-10"}, "web-fetch-2025-09-10"),
    ("web_search tool (messages)", "messages", {**MESSAGES, "tools": [{"type": "web_search_20250305", "name": "web_search"}]},
     "", {}, "web_search_20250305"),
    ("a field no list names (vLLM's scheduling priority)", "chat", {**CHAT, "priority": -100}, "", {}, "'priority'"),
    ("fast mode", "messages", {**MESSAGES, "speed": "fast"}, "", {}, "'speed'"),
]


@pytest.mark.parametrize("name, kind, body, query, headers, named", ATTACKS, ids=[a[0] for a in ATTACKS])
def test_an_attack_request_is_refused_before_the_upstream(offline_gateways, name, kind, body, query, headers, named):
    if name not in ("a field no list names (vLLM's scheduling priority)", "query string", "query string (messages)"):
        assert problems(kind, body, beta=kind == "messages") == [], "not a request the real API takes: tests nothing"
    upstream, endpoints = offline_gateways
    endpoint = endpoints["anthropic" if kind == "messages" else "openai"]
    reply = send(endpoint, kind, body, query, **headers)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert named in error["message"] and error["message"].startswith("agentcompass gateway: "), error
    assert upstream.received == []
    assert endpoint.usage()["calls"] == 0 and endpoint.usage()["refused"] >= 1  # counted apart, not a call


@pytest.mark.parametrize("kind, field, asked", [("chat", "max_tokens", 1_000_000), ("chat", "max_completion_tokens", 10**6),
                                                ("responses", "max_output_tokens", 1_000_000),
                                                ("messages", "max_tokens", 1_000_000)])
def test_an_output_limit_above_the_models_is_lowered_to_it(upstream, gateways, local_sandbox, tmp_path, kind, field, asked):
    """The real APIs refuse a limit above the model's; the gateway sends the model's own (the preset's figure, else
    litellm's), so the agent gets what the API would at most have given."""
    from agentcompass.core.models import import_litellm

    preset = CLAUDE if kind == "messages" else GPT
    body = {**{"chat": CHAT, "responses": RESPONSES, "messages": MESSAGES}[kind], field: asked}
    endpoint = gateways(preset, upstream.url, reasoning=None).endpoint(new_trial(tmp_path), local_sandbox)
    assert send(endpoint, kind, body).status_code == 200
    litellm_name = "claude-sonnet-4-5-20250929" if kind == "messages" else "gpt-5.5"
    assert upstream.received[0].body[field] == import_litellm().model_cost[litellm_name]["max_output_tokens"]
    own = gateways(GLM, upstream.url, max_output_tokens=8192).endpoint(new_trial(tmp_path, "own"), local_sandbox)
    if kind != "messages":
        assert send(own, kind, body).status_code == 200
        assert upstream.received[1].body[field] == 8192


def test_hosted_tools_reach_the_upstream_only_when_the_task_has_internet(upstream, gateways, sandbox, tmp_path):
    endpoint = gateways(GPT, upstream.url).endpoint(new_trial(tmp_path), sandbox)
    body = {**RESPONSES, "tools": [WEB_SEARCH]}
    reply = send(endpoint, "responses", body)
    online = sandbox.spec.allow_internet
    assert reply.status_code == (200 if online else 400), reply.text
    assert [r.body["tools"] for r in upstream.received] == ([[WEB_SEARCH]] if online else [])


def test_tokens_of_no_live_trial_are_refused(upstream, gateways, local_sandbox, tmp_path):
    gateway = gateways(GLM, upstream.url)
    other = gateways(GLM, upstream.url)  # another run's gateway
    endpoint = gateway.endpoint(new_trial(tmp_path, "a"), local_sandbox)
    foreign = other.endpoint(new_trial(tmp_path, "b"), local_sandbox)
    url = f"{endpoint.openai_base_url.split('/t/')[0]}/v1/chat/completions"
    assert post(url, json=CHAT).status_code == 401
    assert post(url, json=CHAT, headers={"authorization": f"Bearer {foreign.api_key}"}).status_code == 401
    assert post(f"{endpoint.openai_base_url.split('/t/')[0]}/t/{foreign.api_key}/v1/chat/completions", json=CHAT).status_code == 401
    assert upstream.received == []


# -- honest controls: the shipped CLIs' own requests pass as they were sent --------------------------------------
@pytest.mark.parametrize("name", list(RECORDED))
def test_each_shipped_clis_request_reaches_the_upstream_unchanged(upstream, gateways, tmp_path, name):
    """Recorded from the pinned CLIs (tests/data/gateway-cli-requests.json). With no tier to set, the upstream gets
    the very body the CLI sent (its model name aside) and the headers it sent, streamed and metered as usual."""
    sent = RECORDED[name]
    kind, body = sent["kind"], sent["body"]
    online = "without internet" not in name
    preset = CLAUDE if kind == "messages" else GPT
    made = LocalProvider(isolation="none").open(SandboxSpec(name=f"gwp-{uuid.uuid4().hex[:8]}", workdir="/app",
                                                             allow_internet=online))
    try:
        trial = new_trial(tmp_path)
        endpoint = gateways(preset, upstream.url, reasoning=None, reasoning_map={}).endpoint(trial, made)
    finally:
        made.close()
    base = endpoint.anthropic_base_url + "/v1" if kind == "messages" else endpoint.openai_base_url
    url = f"{base}/{sent['path']}" + (f"?{sent['query']}" if sent["query"] else "")
    status, text = stream_text(url, body, authorization=f"Bearer {endpoint.api_key}", **sent["headers"])
    assert status == 200, text
    (got,) = upstream.received
    model = {"messages": "claude-sonnet-4-5-20250929", "chat": "gpt-5.5", "responses": "gpt-5.5"}[kind]
    expected = {**body, "model": model}
    if kind == "chat" and not (body.get("stream_options") or {}).get("include_usage"):
        expected["stream_options"] = {"include_usage": True}  # asked on the client's behalf, kept from it
    assert got.body == expected
    assert got.path.partition("?")[2] == sent["query"]
    for header in ("anthropic-beta", "anthropic-version", "accept"):
        assert got.headers.get(header) == sent["headers"].get(header, got.headers.get(header))
    assert endpoint.usage()["calls"] == 1 and upstream.usages  # metered from the server's own usage
    tokens_in = endpoint.usage()["tokens_in"]
    usage = upstream.usages[0]
    assert tokens_in == usage.get("prompt_tokens", usage.get("input_tokens", 0) + usage.get("cache_read_input_tokens", 0)
                                  + usage.get("cache_creation_input_tokens", 0))


def test_every_documented_field_is_either_forwarded_or_refused_with_a_reason():
    """The SDKs list what each API takes: a field they add later must be decided on here, not forwarded by default."""
    sdk = {"chat": adapter("chat", True)[1], "responses": adapter("responses", True)[1],
           "messages": adapter("messages", True, beta=True)[1] | adapter("messages", True)[1]}
    for kind, known in sdk.items():
        undecided = sorted(known - FIELDS[kind] - REFUSED_FIELDS.keys())
        assert undecided == [], f"{kind}: decide on {undecided} in agentcompass/gateway/policy.py"


# -- where it listens -----------------------------------------------------------------------------------------
def run_config(env: str, url: str, **run: Any) -> Any:
    """What Gateway.for_run reads of a composed config."""
    from types import SimpleNamespace

    from agentcompass.core.schema import EnvConfig, ModelConfig, RunConfig

    model = ModelConfig(**{**GLM, "base_url": f"{url}/v1", "api_key": "sk-x"})
    return SimpleNamespace(model=model, run=RunConfig(run_name="gwp", **run), env=EnvConfig(name=env))


@pytest.mark.parametrize("env", ["local", "docker"])
def test_the_gateway_listens_only_where_the_runs_sandboxes_reach_it(upstream, local_sandbox, tmp_path, env):
    """Before any container asks for it, a docker run's gateway listens on loopback alone, as a local run's does:
    from this machine's other addresses (another host on its network) nothing answers."""
    from agentcompass.gateway.server import Gateway

    others = own_addresses()
    assert others, "no address besides loopback: this test would prove nothing"
    with Gateway.for_run(run_config(env, upstream.url)) as gateway:
        gateway.endpoint(new_trial(tmp_path), local_sandbox)
        assert gateway.addresses == ["127.0.0.1"] and connects("127.0.0.1", gateway.port)
        assert [address for address in others if connects(address, gateway.port)] == []


@pytest.mark.parametrize("public_url, listens", [("https://tunnel.example/gw", "127.0.0.1"),
                                                 ("http://127.0.0.1:9999", "127.0.0.1")])
def test_a_tunnels_gateway_listens_where_the_tunnel_connects(upstream, public_url, listens):
    from agentcompass.gateway.server import Gateway

    resolved = run_config("modal", upstream.url, gateway={"public_url": public_url})
    with Gateway.for_run(resolved) as gateway:
        assert gateway.addresses == [listens]


@pytest.mark.parametrize("online", [False, True])
def test_codex_offers_openais_web_search_only_on_a_task_with_internet(online):
    """Codex 0.171 offers OpenAI's hosted web_search (live web access) on every request unless its config says
    `web_search = "disabled"`; offline, the gateway would refuse every call of an honest codex without it."""
    import tomllib
    from types import SimpleNamespace

    from agentcompass.core.schema import ModelConfig
    from agentcompass.harnesses.codex import CodexHarness

    model = ModelConfig(**{**GPT, "base_url": "http://x/v1", "api_key": "sk-x"})
    endpoint = SimpleNamespace(openai_base_url="http://x/v1", hosted_tools=online)
    config = tomllib.loads(CodexHarness.config_files(CodexHarness.__new__(CodexHarness), model, endpoint)[".codex/config.toml"])
    assert config.get("web_search") == (None if online else "disabled")
