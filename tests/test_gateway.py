"""The model gateway: tiers on every request, per-call records equal to the upstream's usage, streams relayed
event by event, per-trial tokens, the upstream key kept on the host, outages as 5xx. Real HTTP on 127.0.0.1."""

from __future__ import annotations

import json
import socket
import threading
from typing import Any

import httpx
import pytest

from gateway_upstream import KEY
from gateway_fixtures import CLAUDE, GLM, HELLO, calls_of, new_trial, post, start_gateway, stream_text
from gateway_fixtures import gateways, local_sandbox, upstream  # noqa: F401 (fixtures)


# -- (a) the tier and model on every request ---------------------------------------------------
@pytest.mark.parametrize("tier", ["none", "high", "max"])
def test_every_request_carries_the_presets_tier_whatever_the_client_sends(upstream, gateways, local_sandbox, tmp_path, tier):
    gateway = gateways(GLM, upstream.url, reasoning=tier)
    endpoint = gateway.endpoint(new_trial(tmp_path), local_sandbox)
    sent = {"model": "gpt-4", "messages": HELLO, "chat_template_kwargs": {"enable_thinking": True,
                                                                           "reasoning_effort": "low", "keep": 1}}
    auth = {"authorization": f"Bearer {endpoint.api_key}"}
    assert post(f"{endpoint.openai_base_url}/chat/completions", json=sent, headers=auth).status_code == 200
    assert stream_text(f"{endpoint.openai_base_url}/chat/completions", {**sent, "stream": True}, **auth)[0] == 200
    responses = {k: v for k, v in sent.items() if k != "messages"} | {"input": "hi"}
    assert post(f"{endpoint.openai_base_url}/responses", json=responses, headers=auth).status_code == 200
    expected = {"keep": 1, **GLM["reasoning_map"][tier].get("chat_template_kwargs", {})}
    assert [r.body["chat_template_kwargs"] for r in upstream.received] == [expected] * 3
    assert [r.body["model"] for r in upstream.received] == ["zai-org/GLM-5.2-FP8"] * 3
    assert [r.headers["authorization"] for r in upstream.received] == [f"Bearer {KEY}"] * 3


@pytest.mark.parametrize("tier", ["none", "high"])
def test_an_anthropic_tier_replaces_the_clients_thinking(upstream, gateways, local_sandbox, tmp_path, tier):
    gateway = gateways(CLAUDE, upstream.url, reasoning=tier)
    endpoint = gateway.endpoint(new_trial(tmp_path), local_sandbox)
    sent = {"model": "claude-x", "max_tokens": 4096, "messages": HELLO, "thinking": {"type": "enabled", "budget_tokens": 1024}}
    reply = post(f"{endpoint.anthropic_base_url}/v1/messages?beta=true", json=sent,
                       headers={"x-api-key": endpoint.api_key, "anthropic-beta": "interleaved-thinking-2025-05-14"})
    assert reply.status_code == 200, reply.text
    got = upstream.received[0]
    assert got.path == "/v1/messages?beta=true" and got.headers["anthropic-beta"] == "interleaved-thinking-2025-05-14"
    assert got.body["model"] == "claude-sonnet-4-5-20250929"
    assert got.body.get("thinking") == CLAUDE["reasoning_map"][tier].get("thinking")
    assert got.body["max_tokens"] == CLAUDE["reasoning_map"][tier].get("max_tokens", 4096)
    assert got.headers["x-api-key"] == KEY and got.headers["anthropic-version"] == "2023-06-01"


# -- (b) metering -------------------------------------------------------------------------------
def chat_row(usage: dict[str, Any]) -> tuple[int, int, int]:
    return usage["prompt_tokens"], usage["completion_tokens"], usage["prompt_tokens_details"]["cached_tokens"]


def responses_row(usage: dict[str, Any]) -> tuple[int, int, int]:
    return usage["input_tokens"], usage["output_tokens"], usage["input_tokens_details"]["cached_tokens"]


def anthropic_row(usage: dict[str, Any]) -> tuple[int, int, int]:
    """Anthropic counts cache reads and writes apart from input_tokens; the records count them as input."""
    read = usage["cache_read_input_tokens"]
    return usage["input_tokens"] + read + usage["cache_creation_input_tokens"], usage["output_tokens"], read


def test_call_records_equal_the_upstreams_usage_plain_and_streamed(upstream, gateways, local_sandbox, tmp_path):
    openai = gateways(GLM, upstream.url, reasoning="high")
    trial = new_trial(tmp_path, "openai")
    endpoint = openai.endpoint(trial, local_sandbox)
    base, auth = endpoint.openai_base_url, {"authorization": f"Bearer {endpoint.api_key}"}
    post(f"{base}/chat/completions", json={"messages": HELLO}, headers=auth).raise_for_status()
    _, own_usage = stream_text(f"{base}/chat/completions", {"messages": HELLO, "stream": True,
                                                            "stream_options": {"include_usage": True}}, **auth)
    _, no_usage = stream_text(f"{base}/chat/completions", {"messages": HELLO, "stream": True}, **auth)
    post(f"{base}/responses", json={"input": "hi"}, headers=auth).raise_for_status()
    stream_text(f"{base}/responses", {"input": "hi", "stream": True}, **auth)
    # A client that asked for the usage chunk gets it; one that did not sees its stream unchanged.
    assert '"usage"' in own_usage and '"usage"' not in no_usage and no_usage.endswith("data: [DONE]\n\n")
    assert upstream.received[2].body["stream_options"] == {"include_usage": True}
    expected = [chat_row(u) for u in upstream.usages[:3]] + [responses_row(u) for u in upstream.usages[3:]]
    rows = calls_of(trial)
    assert [(r["tokens_in"], r["tokens_out"], r["tokens_cached"]) for r in rows] == expected
    assert all(r["status"] == "ok" and r["end"] >= r["start"] and r["cost_usd"] > 0 for r in rows)
    totals = endpoint.usage()
    assert (totals["tokens_in"], totals["tokens_out"], totals["tokens_cached"]) == tuple(map(sum, zip(*expected)))
    assert totals["calls"] == 5 and totals["errors_5xx"] == 0
    assert totals["generation_s"] == pytest.approx(sum(r["duration_s"] for r in rows), abs=1e-5)
    # Hourly pricing: each call costs the rate times its duration.
    assert [r["cost_usd"] for r in rows] == pytest.approx([GLM["pricing"]["hourly_usd"] * r["duration_s"] / 3600 for r in rows], rel=1e-3)

    anthropic = gateways(CLAUDE, upstream.url)
    trial = new_trial(tmp_path, "anthropic")
    endpoint = anthropic.endpoint(trial, local_sandbox)
    body, key = {"max_tokens": 64, "messages": HELLO}, {"x-api-key": endpoint.api_key}
    post(f"{endpoint.anthropic_base_url}/v1/messages", json=body, headers=key).raise_for_status()
    status, text = stream_text(f"{endpoint.anthropic_base_url}/v1/messages", {**body, "stream": True}, **key)
    assert status == 200 and "event: message_stop" in text
    rows = calls_of(trial)
    assert [(r["tokens_in"], r["tokens_out"], r["tokens_cached"]) for r in rows] == [anthropic_row(u) for u in upstream.usages[5:]]


def test_a_stream_is_relayed_event_by_event(upstream, gateways, local_sandbox, tmp_path):
    """The upstream holds the rest of its stream until the client has the first event: a gateway that
    buffered the stream would never deliver it."""
    upstream.gate = threading.Event()
    endpoint = gateways(GLM, upstream.url).endpoint(new_trial(tmp_path), local_sandbox)
    body = {"messages": HELLO, "stream": True}
    with httpx.stream("POST", f"{endpoint.openai_base_url}/chat/completions", json=body,
                      headers={"authorization": f"Bearer {endpoint.api_key}"}, timeout=60) as reply:
        events = reply.iter_lines()
        first = next(line for line in events if line)
        assert not upstream.gate.is_set() and '"content": "Hel"' in first
        upstream.gate.set()
        rest = [line for line in events if line]
    assert rest[-1] == "data: [DONE]" and '"content": "lo"' in rest[0]


def test_a_release_waits_until_a_stream_its_client_dropped_is_recorded(upstream, gateways, local_sandbox, tmp_path):
    """A client killed with its sandbox mid-stream (an interrupt): the gateway cuts the stream a moment later. Its
    record must be in the try's files once release returns, because the try's folder is then set aside (moved)."""
    upstream.gate = threading.Event()  # the stream pauses after its first event
    gateway, trial = gateways(GLM, upstream.url), new_trial(tmp_path)
    endpoint = gateway.endpoint(trial, local_sandbox)
    with httpx.stream("POST", f"{endpoint.openai_base_url}/chat/completions", json={"messages": HELLO, "stream": True},
                      headers={"authorization": f"Bearer {endpoint.api_key}"}, timeout=30) as reply:
        assert '"content": "Hel"' in next(line for line in reply.iter_lines() if line)
    gateway.release(endpoint)  # the client has hung up
    aside = trial.dir.rename(tmp_path / "aside")
    upstream.gate.set()
    (row,) = [json.loads(line) for line in (aside / "model_calls.jsonl").read_text().splitlines()]
    assert row["status"] == "error" and row["cost_usd"] is None  # cut short: no usage came back
    assert endpoint.usage()["errors"] == 1


# -- (c) tokens and the key ----------------------------------------------------------------------
def test_only_a_live_trial_token_is_accepted(upstream, gateways, local_sandbox, tmp_path):
    gateway = gateways(GLM, upstream.url)
    endpoint = gateway.endpoint(new_trial(tmp_path), local_sandbox)
    root = endpoint.openai_base_url.split("/t/")[0]
    body = {"messages": HELLO}
    assert post(f"{root}/t/acg-unknown/v1/chat/completions", json=body).status_code == 401
    assert post(f"{root}/v1/chat/completions", json=body, headers={"authorization": "Bearer nope"}).status_code == 401
    assert post(f"{root}/v1/chat/completions", json=body, headers={"authorization": f"Bearer {KEY}"}).status_code == 401
    assert post(f"{root}/v1/chat/completions", json=body,
                      headers={"authorization": f"Bearer {endpoint.api_key}"}).status_code == 200
    assert post(f"{root}/v1/chat/completions", json=body, headers={"x-api-key": endpoint.api_key}).status_code == 200
    gateway.release(endpoint)
    assert post(f"{endpoint.openai_base_url}/chat/completions", json=body).status_code == 401
    assert len(upstream.received) == 2  # nothing refused reached the upstream


def test_the_upstream_key_never_reaches_the_client_nor_the_trial_dir(upstream, gateways, local_sandbox, tmp_path):
    upstream.key = "sk-another-key"  # the upstream refuses our key and quotes it back in its 401
    trial = new_trial(tmp_path)
    endpoint = gateways(GLM, upstream.url).endpoint(trial, local_sandbox)
    reply = post(f"{endpoint.openai_base_url}/chat/completions", json={"messages": HELLO},
                       headers={"authorization": f"Bearer {endpoint.api_key}"})
    assert reply.status_code == 401  # an upstream 401 passes through
    assert upstream.received[0].headers["authorization"] == f"Bearer {KEY}"  # it was sent upstream
    seen = reply.text + json.dumps(dict(reply.headers)) + repr(endpoint)
    assert KEY not in seen and "Incorrect API key provided: ***" in reply.text
    assert endpoint.usage()["errors_5xx"] == 0 and endpoint.usage()["errors"] == 1
    assert not any(KEY in path.read_text() for path in trial.dir.rglob("*") if path.is_file())


# -- outages --------------------------------------------------------------------------------------
def test_an_outage_reaches_the_client_as_5xx_and_is_counted(upstream, gateways, local_sandbox, tmp_path):
    trial = new_trial(tmp_path)
    gateway = gateways(GLM, upstream.url)
    endpoint = gateway.endpoint(trial, local_sandbox)
    url, auth = f"{endpoint.openai_base_url}/chat/completions", {"authorization": f"Bearer {endpoint.api_key}"}
    upstream.statuses = [503]
    assert post(url, json={"messages": HELLO}, headers=auth).status_code == 503
    upstream.cut_stream = True  # the endpoint breaks off mid-stream: the client sees a cut stream
    status, text = stream_text(url, {"messages": HELLO, "stream": True}, **auth)
    assert status == 200 and "[DONE]" not in text
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{free.getsockname()[1]}"
    unreachable = gateways(GLM, dead, connect_timeout_s=2)
    other = new_trial(tmp_path, "dead")
    lost = unreachable.endpoint(other, local_sandbox)
    reply = post(f"{lost.openai_base_url}/chat/completions", json={"messages": HELLO},
                       headers={"authorization": f"Bearer {lost.api_key}"})
    assert reply.status_code == 502 and "cannot reach the model endpoint" in reply.json()["error"]["message"]
    assert endpoint.usage()["errors_5xx"] == 2 and lost.usage()["errors_5xx"] == 1
    assert [r["status"] for r in calls_of(trial) + calls_of(other)] == ["error"] * 3


def test_a_client_speaking_another_api_is_refused_with_the_reason(upstream, gateways, local_sandbox, tmp_path):
    endpoint = gateways(GLM, upstream.url).endpoint(new_trial(tmp_path), local_sandbox)
    reply = post(f"{endpoint.anthropic_base_url}/v1/messages", json={"max_tokens": 5, "messages": HELLO},
                       headers={"x-api-key": endpoint.api_key})
    assert reply.status_code == 400 and "does not translate anthropic requests" in reply.json()["error"]["message"]
    assert upstream.received == []


def test_the_gateway_stops(upstream, local_sandbox, tmp_path):
    gateway = start_gateway(GLM, upstream.url)
    endpoint = gateway.endpoint(new_trial(tmp_path), local_sandbox)
    gateway.stop()
    assert not gateway.running
    with pytest.raises(httpx.ConnectError):
        post(f"{endpoint.openai_base_url}/chat/completions", json={"messages": HELLO})
