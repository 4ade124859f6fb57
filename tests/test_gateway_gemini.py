"""The gateway's Gemini API: the official google-genai SDK as the client, the scripted endpoint (tests/fake_llm_gemini.py)
as the upstream, real HTTP on 127.0.0.1. Every body the upstream gets is validated with google-genai's own types;
usage is metered as the upstream reported it; the tier replaces the client's thinking; a wrong key and what the
policy refuses never reach the upstream; the real key reaches it only in its header."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from google import genai
from google.genai import errors, types

from fake_llm_server import FakeLLM, FakeLLMServer
from gateway_fixtures import calls_of, new_trial, post, stream_text
from gateway_fixtures import local_sandbox, sandbox  # noqa: F401 (fixtures)
from gateway_upstream import KEY
from agentcompass.core.sandbox import SandboxSpec
from agentcompass.core.schema import GatewaySettings, ModelConfig
from agentcompass.providers.local.provider import LocalProvider
from agentcompass.gateway.app import StreamUsage
from agentcompass.gateway.caps import SpendCaps
from agentcompass.gateway.server import Gateway

REPO = Path(__file__).resolve().parent.parent
FLASH = yaml.safe_load((REPO / "conf/models/gemini-2.5-flash.yaml").read_text())
LEVELS = {**FLASH, "name": "gemini/gemini-3-pro-preview", "reasoning": "low", "pricing": None,
          "reasoning_map": {"low": {"generationConfig": {"thinkingConfig": {"thinkingLevel": "LOW"}}},
                            "high": {"generationConfig": {"thinkingConfig": {"thinkingLevel": "HIGH"}}}}}
SHELL = types.Tool(function_declarations=[types.FunctionDeclaration(
    name="run_shell_command", description="Run a shell command",
    parameters_json_schema={"type": "object", "properties": {"command": {"type": "string"},
                                                             "description": {"type": "string"}},
                            "required": ["command"]})])
LIMIT = 4096  # the preset's output limit in these tests (litellm's figure needs its slow import)


@pytest.fixture
def scripted():
    llm = FakeLLM(commands=["echo one", "echo two", "echo three"], api_key=KEY)
    with FakeLLMServer(llm) as server:
        yield llm, f"http://127.0.0.1:{server.port}"


@pytest.fixture
def gateway_for():
    started: list[Gateway] = []

    def make(preset: dict[str, Any], url: str, caps: SpendCaps | None = None, **changes: Any) -> Gateway:
        model = ModelConfig(**{**preset, "base_url": url, "api_key": KEY, "max_output_tokens": LIMIT, **changes})
        started.append(Gateway(model, "gwgemini", GatewaySettings(), "127.0.0.1", caps).start())
        return started[-1]

    yield make
    for gateway in started:
        gateway.stop()


def sdk(endpoint: Any, key: str | None = None, base_url: str | None = None) -> genai.Client:
    return genai.Client(api_key=key or endpoint.api_key,
                        http_options=types.HttpOptions(base_url=base_url or endpoint.gemini_base_url))


def config(**changes: Any) -> types.GenerateContentConfig:
    thinking = types.ThinkingConfig(thinking_budget=1024, include_thoughts=True)
    return types.GenerateContentConfig(**{"tools": [SHELL], "max_output_tokens": 10**6, "thinking_config": thinking,
                                          "system_instruction": "You are an agent.", **changes})


def valid_request(body: dict[str, Any]) -> None:
    """The body as the Gemini API takes it: each part one of google-genai's types, nothing else at the top."""
    assert set(body) <= {"contents", "tools", "toolConfig", "systemInstruction", "generationConfig", "safetySettings"}
    for content in body["contents"]:
        types.Content.model_validate(content)
    for tool in body.get("tools", []):
        types.Tool.model_validate(tool)
    types.GenerationConfig.model_validate(body.get("generationConfig", {}))
    if "systemInstruction" in body:
        types.Content.model_validate(body["systemInstruction"])


def test_sdk_calls_are_forwarded_with_the_tier_and_metered_as_the_upstream_reported(scripted, gateway_for, local_sandbox,
                                                                                   tmp_path):
    llm, url = scripted
    gateway = gateway_for(FLASH, url, reasoning="low")
    trial = new_trial(tmp_path)
    endpoint = gateway.endpoint(trial, local_sandbox)
    client = sdk(endpoint)
    first = client.models.generate_content(model="gemini-pro-latest", contents="List the files.", config=config())
    call = first.function_calls[0]
    assert (call.name, call.args["command"]) == ("run_shell_command", "echo one")
    history = [types.Content(role="user", parts=[types.Part(text="List the files.")]), first.candidates[0].content,
               types.Content(role="user", parts=[types.Part.from_function_response(name="run_shell_command",
                                                                                   response={"output": "one"})])]
    streamed = list(client.models.generate_content_stream(model="gemini-pro-latest", contents=history, config=config()))
    assert [c.args["command"] for chunk in streamed for c in chunk.function_calls or []] == ["echo two"]
    assert client.models.count_tokens(model="gemini-pro-latest", contents="hi").total_tokens == 100

    assert len(llm.requests) == 2 and all(r.status == 200 and r.api == "gemini" for r in llm.requests)
    for recorded in llm.requests:
        valid_request(recorded.body)
        thinking = recorded.body["generationConfig"]["thinkingConfig"]
        assert thinking == {"thinkingBudget": 2048, "includeThoughts": True}  # the tier's budget; display kept
        assert recorded.body["generationConfig"]["maxOutputTokens"] == LIMIT
        assert recorded.authorization == f"Bearer {KEY}"
    usage = endpoint.usage()
    sent = [r.usage for r in llm.requests]
    tokens_in = sum(u["prompt_tokens"] for u in sent)
    tokens_out = sum(u["completion_tokens"] for u in sent)
    cached = sum(u["prompt_tokens_details"]["cached_tokens"] for u in sent)
    assert (usage["tokens_in"], usage["tokens_out"], usage["tokens_cached"], usage["calls"]) == (tokens_in, tokens_out,
                                                                                                 cached, 2)
    assert usage["cost_usd"] == pytest.approx(((tokens_in - cached) * 0.30 + cached * 0.03 + tokens_out * 2.50) / 1e6)
    gateway.release(endpoint)
    assert [row["tokens_out"] for row in calls_of(trial)] == [u["completion_tokens"] for u in sent]
    assert not [p for p in tmp_path.rglob("*") if p.is_file() and KEY in p.read_text(errors="replace")]


def test_a_thinking_level_tier_replaces_the_clients_budget_and_level(scripted, gateway_for, local_sandbox, tmp_path):
    llm, url = scripted
    endpoint = gateway_for(LEVELS, url, reasoning="high").endpoint(new_trial(tmp_path), local_sandbox)
    client = sdk(endpoint)
    client.models.generate_content(model="m", contents="go", config=config())  # the client sends a budget
    level = types.ThinkingConfig(thinking_level=types.ThinkingLevel.LOW)
    client.models.generate_content(model="m", contents="go", config=config(thinking_config=level))
    assert [r.body["generationConfig"]["thinkingConfig"] for r in llm.requests] == [
        {"thinkingLevel": "HIGH", "includeThoughts": True}, {"thinkingLevel": "HIGH"}]
    for recorded in llm.requests:  # one of budget and level, in a spelling and value the SDK's types take
        valid_request(recorded.body)


def test_a_wrong_key_is_refused_and_the_key_may_come_in_the_query(scripted, gateway_for, local_sandbox, tmp_path):
    llm, url = scripted
    endpoint = gateway_for(FLASH, url).endpoint(new_trial(tmp_path), local_sandbox)
    root = endpoint.gemini_base_url.rsplit("/t/", 1)[0]  # no token in the path: the key alone names the trial
    stranger = sdk(endpoint, key="acg-not-a-trial", base_url=root)  # held: a dropped client closes its pool
    with pytest.raises(errors.ClientError) as refused:
        stranger.models.generate_content(model="m", contents="go", config=config())
    assert refused.value.code == 401 and not llm.requests
    body = {"contents": [{"role": "user", "parts": [{"text": "go"}]}], "tools": [SHELL.model_dump(by_alias=True, exclude_none=True)]}
    reply = post(f"{root}/v1beta/models/m:generateContent?key={endpoint.api_key}", json=body)
    assert reply.status_code == 200, reply.text
    status, text = stream_text(f"{root}/v1beta/models/m:streamGenerateContent?alt=sse",
                               body, **{"x-goog-api-key": endpoint.api_key})
    assert status == 200 and '"finishReason": "STOP"' in text
    assert [r.authorization for r in llm.requests] == [f"Bearer {KEY}"] * 2
    assert endpoint.usage()["calls"] == 2


TOOL = {"functionDeclarations": [{"name": "run_shell_command", "parameters": {"type": "OBJECT"}}]}
HI = [{"role": "user", "parts": [{"text": "hi"}]}]


@pytest.fixture
def offline():
    made = LocalProvider(isolation="none").open(SandboxSpec(name=f"gwg-{uuid.uuid4().hex[:8]}", workdir="/app",
                                                             allow_internet=False))
    yield made
    made.close()


def test_hosted_tools_reach_the_upstream_only_when_the_task_has_internet(scripted, gateway_for, sandbox, tmp_path):
    llm, url = scripted
    endpoint = gateway_for(FLASH, url).endpoint(new_trial(tmp_path), sandbox)
    body = {"contents": HI, "tools": [TOOL, {"googleSearch": {}}]}
    reply = post(f"{endpoint.gemini_base_url}/v1beta/models/m:generateContent", json=body,
                 headers={"x-goog-api-key": endpoint.api_key})
    online = sandbox.spec.allow_internet
    assert reply.status_code == (200 if online else 400), reply.text
    assert [r.body["tools"] for r in llm.requests] == ([body["tools"]] if online else [])


@pytest.mark.parametrize("method, body, said", [
    ("generateContent", {"contents": HI, "tools": [{"googleSearch": {}}]}, "'googleSearch' is run by the provider"),
    ("generateContent", {"contents": HI, "tools": [TOOL, {"codeExecution": {}}]}, "'codeExecution' is run by the provider"),
    ("generateContent", {"contents": HI, "tools": [{"google_search": {}}]}, "'googleSearch' is run by the provider"),
    ("generateContent", {"contents": HI, "tools": [{"googleSearch": {}, "google_search": {}}]}, "twice"),
    ("generateContent", {"contents": HI, "tools": [{"webSearch": {}}]}, "'webSearch' is not forwarded"),
    ("generateContent", {"contents": HI, "generation_config": {"candidate_count": 4}}, "one candidate per call"),
    ("generateContent", {"contents": HI, "generationConfig": {}, "generation_config": {"candidateCount": 4}}, "twice"),
    ("generateContent", {"contents": HI, "generationConfig": {"thinkingConfig": {"thinkingBudget": 1,
                                                                                 "thinking_budget": 2}}}, "twice"),
    ("generateContent", {"contents": HI, "generationConfig": {"candidateCount": 3}}, "one candidate per call"),
    ("generateContent", {"contents": HI, "cachedContent": "cachedContents/x"}, "server-side state"),
    ("generateContent", {"contents": HI, "generationConfig": {"responseModalities": ["AUDIO"]}}, "only text"),
    ("generateContent", {"contents": HI, "serviceTier": "priority"}, "billed apart"),
    ("streamGenerateContent", {"contents": HI}, "with ?alt=sse only"),
    ("countTokens", {"generateContentRequest": {"contents": HI, "tools": [{"urlContext": {}}]}}, "'urlContext' is run"),
])
def test_what_the_policy_refuses_never_reaches_the_upstream(scripted, gateway_for, offline, tmp_path, method, body, said):
    llm, url = scripted
    endpoint = gateway_for(FLASH, url).endpoint(new_trial(tmp_path), offline)
    reply = post(f"{endpoint.gemini_base_url}/v1beta/models/m:{method}", json=body,
                 headers={"x-goog-api-key": endpoint.api_key})
    assert reply.status_code == 400 and said in reply.json()["error"]["message"], reply.text
    assert reply.json()["error"]["status"] == "INVALID_ARGUMENT" and not llm.requests and not llm.checks
    assert endpoint.usage()["refused"] == 1


def test_an_unknown_query_parameter_is_refused_and_the_upstream_never_gets_the_clients_key(scripted, gateway_for,
                                                                                            local_sandbox, tmp_path):
    llm, url = scripted
    endpoint = gateway_for(FLASH, url).endpoint(new_trial(tmp_path), local_sandbox)
    base, key = f"{endpoint.gemini_base_url}/v1beta/models/m", {"x-goog-api-key": endpoint.api_key}
    body = {"contents": HI, "tools": [TOOL]}
    assert post(f"{base}:generateContent?alt=sse&upload_protocol=raw", json=body, headers=key).status_code == 400
    assert post(f"{base}:generateContent?key={endpoint.api_key}", json=body).status_code == 200
    assert len(llm.requests) == 1 and endpoint.api_key not in json.dumps(llm.requests[0].body)


def test_gemini_requests_to_an_openai_upstream_are_refused_with_a_reason(scripted, gateway_for, local_sandbox, tmp_path):
    llm, url = scripted
    glm = yaml.safe_load((REPO / "conf/models/glm-5.2.yaml").read_text())
    endpoint = gateway_for(glm, f"{url}/v1").endpoint(new_trial(tmp_path), local_sandbox)
    reply = post(f"{endpoint.gemini_base_url}/v1beta/models/m:generateContent", json={"contents": HI},
                 headers={"x-goog-api-key": endpoint.api_key})
    assert reply.status_code == 400 and "does not translate Gemini requests" in reply.json()["error"]["message"]
    assert not llm.requests


def test_a_request_in_snake_case_as_litellm_sends_it_is_forwarded_with_its_limit_lowered(scripted, gateway_for, offline,
                                                                                       tmp_path):
    llm, url = scripted
    endpoint = gateway_for(FLASH, url, reasoning="none").endpoint(new_trial(tmp_path), offline)
    sent = {"contents": HI, "system_instruction": {"parts": [{"text": "sys"}]},
            "tools": [{"function_declarations": [{"name": "run_shell_command", "parameters": {
                "type": "object", "properties": {"command": {"type": "string"}}}}]}],
            "generationConfig": {"max_output_tokens": 10**6, "thinking_config": {"thinking_budget": 512}}}
    reply = post(f"{endpoint.gemini_base_url}/v1beta/models/m:generateContent", json=sent,
                 headers={"x-goog-api-key": endpoint.api_key})
    assert reply.status_code == 200, reply.text
    got = llm.requests[0].body
    valid_request(got)
    assert got["generationConfig"] == {"maxOutputTokens": LIMIT, "thinkingConfig": {"thinkingBudget": 0}}
    assert got["tools"][0]["functionDeclarations"][0]["parameters"] == sent["tools"][0]["function_declarations"][0]["parameters"]


def test_a_spend_cap_stops_gemini_calls(scripted, gateway_for, local_sandbox, tmp_path):
    llm, url = scripted
    endpoint = gateway_for(FLASH, url, SpendCaps(trial_tokens=1)).endpoint(new_trial(tmp_path), local_sandbox)
    client = sdk(endpoint)
    client.models.generate_content(model="m", contents="go", config=config())
    with pytest.raises(errors.ClientError) as capped:
        client.models.generate_content(model="m", contents="go", config=config())
    assert capped.value.code == 400 and "spend cap reached" in capped.value.message
    assert len(llm.requests) == 1 and endpoint.capped.is_set()


def test_a_stream_is_whole_only_with_its_finish_reason_and_its_last_usage_counts():
    usage = StreamUsage("gemini")
    usage.see({"candidates": [{"content": {"parts": [{"text": "a"}]}}], "usageMetadata": {"promptTokenCount": 10}})
    assert not usage.finished  # an endpoint that stops here cut the reply: a failed call, not a free one
    usage.see({"candidates": [{"content": {"parts": [{"text": "b"}]}, "finishReason": "MAX_TOKENS"}],
               "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "thoughtsTokenCount": 7,
                                 "cachedContentTokenCount": 4, "toolUsePromptTokenCount": 2}})
    assert usage.finished and usage.tokens() == (12, 12, 4, 0)


# What google-genai's config holds that never reaches the Gemini API as a request field: the SDK's own settings,
# and fields its Gemini API converter refuses (Vertex AI's).
SDK_ONLY = {"httpOptions", "shouldReturnHttpResponse", "automaticFunctionCalling", "automaticContinuation",
            "generationOutputConfig", "modelArmorConfig"}


def test_every_field_and_tool_of_the_sdks_types_is_decided():
    """A field the SDK adds later fails here until someone allows or refuses it (with its reason)."""
    from agentcompass.gateway import gemini

    decided = gemini.GENERATE_FIELDS | gemini.CONFIG_FIELDS | set(gemini.REFUSED) | SDK_ONLY
    fields = {gemini.camel(name) for kind in (types.GenerateContentConfig, types.GenerationConfig)
              for name in kind.model_fields}
    assert sorted(fields - decided) == []
    assert sorted(fields & set(gemini.REFUSED) & (gemini.GENERATE_FIELDS | gemini.CONFIG_FIELDS)) == []
    tools = {gemini.camel(name) for name in types.Tool.model_fields}
    assert sorted(tools - gemini.CLIENT_TOOLS - gemini.HOSTED_TOOLS) == []
    assert {gemini.camel(name) for name in types.ThinkingConfig.model_fields} == {"includeThoughts",
                                                                                  *gemini.THINKING_CHOICES}
