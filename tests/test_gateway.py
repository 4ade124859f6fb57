"""The model gateway: tiers on every request, per-call records equal to the upstream's usage, streams
relayed event by event, per-trial tokens, the upstream key kept on the host, outages as 5xx, and
reachability from local and docker sandboxes. Real HTTP on 127.0.0.1, a real Docker engine.

Longer than 400 lines because its cases share the fake upstream and gateway fixtures; split with them next.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from agentcompass.gateway.server import Gateway
from agentcompass.providers.local.provider import LocalProvider
from agentcompass.core.sandbox import SandboxSpec
from agentcompass.core.schema import GatewaySettings, ModelConfig
from agentcompass.core.context import TrialContext
from docker_networks import subnet_only_network as subnet_only_network_of
from gateway_upstream import KEY, ScriptedUpstream, serving

REPO = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
GLM = yaml.safe_load((REPO / "conf/models/glm-5.2.yaml").read_text())
CLAUDE = yaml.safe_load((REPO / "conf/models/claude-sonnet-4-5.yaml").read_text())
HELLO = [{"role": "user", "content": "hi"}]


def post(url: str, **kwargs: Any) -> httpx.Response:
    """A client request with room for a busy machine: what these tests check is the gateway's answer, not
    its speed (httpx's default of 5 s cut the first, slowest request of a module short under xdist)."""
    return httpx.post(url, **{"timeout": 60, **kwargs})


@pytest.fixture
def upstream():
    script = ScriptedUpstream()
    with serving(script) as url:
        script.url = url
        yield script


@pytest.fixture
def local_sandbox():
    sandbox = LocalProvider(isolation="none").open(SandboxSpec(name=f"gw-{uuid.uuid4().hex[:8]}", workdir="/app"))
    yield sandbox
    sandbox.close()


def start_gateway(preset: dict[str, Any], url: str, host: str = "127.0.0.1", **changes: Any) -> Gateway:
    base = f"{url}/v1" if preset["api"] == "openai" else url
    model = ModelConfig(**{**preset, "base_url": base, "api_key": KEY, **changes})
    return Gateway(model, "gwtest", GatewaySettings(), host).start()


@pytest.fixture
def gateways():
    started: list[Gateway] = []

    def make(preset: dict[str, Any], url: str, **changes: Any) -> Gateway:
        started.append(start_gateway(preset, url, **changes))
        return started[-1]

    yield make
    for gateway in started:
        gateway.stop()


def new_trial(tmp_path: Path, name: str = "t") -> TrialContext:
    (tmp_path / name).mkdir()
    return TrialContext(name, 1, tmp_path / name, "gwtest")


def calls_of(trial: TrialContext) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (trial.dir / "model_calls.jsonl").read_text().splitlines()]


def stream_text(url: str, body: dict[str, Any], **headers: str) -> tuple[int, str]:
    with httpx.stream("POST", url, json=body, headers=headers, timeout=30) as reply:
        return reply.status_code, reply.read().decode()


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
    assert post(f"{endpoint.openai_base_url}/responses", json={**sent, "input": "hi"}, headers=auth).status_code == 200
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
                      headers={"authorization": f"Bearer {endpoint.api_key}"}, timeout=10) as reply:
        events = reply.iter_lines()
        first = next(line for line in events if line)
        assert not upstream.gate.is_set() and '"content": "Hel"' in first
        upstream.gate.set()
        rest = [line for line in events if line]
    assert rest[-1] == "data: [DONE]" and '"content": "lo"' in rest[0]


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


# -- docker: containers reach the gateway, with or without internet ------------------------------
@pytest.fixture
def subnet_only_network(docker_engine):
    with subnet_only_network_of("gwtest-subnet", 200) as (name, _):
        yield name


def ipam_gateways(network: str) -> list[str]:
    shown = subprocess.run(["docker", "network", "inspect", network, "--format", "{{json .IPAM.Config}}"],
                           capture_output=True, text=True, check=True)
    return [c.get("Gateway", "") for c in json.loads(shown.stdout) or []]


@pytest.mark.docker
@pytest.mark.parametrize("internet, modes, network", [(True, (), "bridge"), (True, (), "subnet-only"), (False, (), None),
                                                      (False, ("no-network", "public"), "bridge")],
                         ids=["bridge", "subnet-only-network", "no-internet", "no-network-phase"])
def test_a_docker_container_reaches_the_gateway(upstream, base_image, tmp_path, internet, modes, network, request):
    """A task without internet (on `none`, or a Harbor phase that left its network) is put on the run's
    internal network, which reaches this host. On the default bridge of Debian's docker.io and on a network
    made with `--subnet` alone the network's IPAM names no gateway: the container's endpoint does."""
    from agentcompass.providers.docker.provider import DockerProvider

    if network == "subnet-only":
        network = request.getfixturevalue("subnet_only_network")
        assert not any(ipam_gateways(network)), "the engine lists a gateway: this case would test nothing"
    run = f"gwtest-{uuid.uuid4().hex[:8]}"
    gateway = start_gateway(GLM, upstream.url, host="0.0.0.0")
    provider = DockerProvider(network=network) if network else DockerProvider()
    sandbox = provider.open(SandboxSpec(name=run, image=base_image, workdir="/", allow_internet=internet,
                                        network_modes=modes, labels={"agentcompass": "1", "run": run}))
    try:
        endpoint = gateway.endpoint(new_trial(tmp_path), sandbox)
        client = ("import json, os, urllib.request; r = urllib.request.Request(os.environ['U'] + '/chat/completions', "
                  "json.dumps({'messages': []}).encode(), {'Authorization': 'Bearer ' + os.environ['K']}); "
                  "print(urllib.request.urlopen(r, timeout=20).status)")
        result = sandbox.exec(f'python3 -c "{client}"', env={"U": endpoint.openai_base_url, "K": endpoint.api_key}, timeout=60)
        assert result.stdout.strip() == "200", result.stderr
        assert endpoint.usage()["calls"] == 1 and len(upstream.received) == 1
        networks = sandbox.api.inspect_container(sandbox.id)["NetworkSettings"]["Networks"]
        if not internet:  # only the run's internal network: this host, nothing beyond
            (name,) = networks
            assert sandbox.api.inspect_network(name)["Internal"] is True
    finally:
        sandbox.close()
        gateway.stop()
    if not internet:
        listed = subprocess.run(["docker", "network", "ls", "-q", "--filter", f"name={name}"], capture_output=True, text=True)
        assert listed.stdout.strip() == ""  # removed with the gateway


# -- the run: started for a harness that uses it, tiers across a sweep, stopped at the end --------
def probe_config(tmp_path: Path, mode: str = "calls") -> Path:
    folder = tmp_path / "config" / "harnesses"
    folder.mkdir(parents=True)
    (folder / "gateway_probe.yaml").write_text(f"name: gateway_probe\ndescription: the gateway's test harness\n"
                                               f"impl: gateway_probe:GatewayProbe\nneeds_model: true\nmode: {mode}\n")
    return tmp_path / "config"


def probe_args(tmp_path: Path, url: str, run_name: str, *extra: str, mode: str = "calls") -> list[str]:
    return ["run", "demo", "gateway_probe", "glm-5.2", "--model-base-url", f"{url}/v1", "--model-api-key", KEY,
            "--no-model-check", "--config-dir", str(probe_config(tmp_path, mode)),
            "--benchmark-params", '{"sample_ids": ["fix-median-bug"]}', "--results-dir", str(tmp_path / "results"),
            "--run-name", run_name, *extra]


def test_a_sweep_sends_each_tier_on_every_call_and_stops_each_gateway(upstream, tmp_path):
    from agentcompass.commands.cli import main

    args = probe_args(tmp_path, upstream.url, "sweep", "-m", "model.reasoning=none,high,max",
                      "--env-params", '{"isolation": "none"}')
    assert main(args) == 0
    assert not [t for t in threading.enumerate() if t.name == "model-gateway"]
    assert len(upstream.received) == 6
    for request in upstream.received:
        tier = request.body["messages"][0]["content"].removeprefix("tier=")
        assert request.body.get("chat_template_kwargs", {}) == GLM["reasoning_map"][tier].get("chat_template_kwargs", {})
    results = tmp_path / "results" / "sweep"
    for trial_dir in results.glob("*/tasks/fix-median-bug/attempt-1"):
        root = json.loads((trial_dir / "gateway.json").read_text())["root"]
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{root}/v1/models")
        rows = calls_of(TrialContext("x", 1, trial_dir, "x"))
        usage = json.loads((trial_dir / "result.json").read_text())["usage"]
        assert usage["tokens_in"] == sum(r["tokens_in"] for r in rows) and usage["model_calls"] == 2
    assert sum(r["tokens_out"] for d in results.glob("*/tasks/*/attempt-1") for r in calls_of(TrialContext("x", 1, d, "x"))) \
        == sum(u["completion_tokens"] for u in upstream.usages)
    assert not any(KEY in p.read_text(errors="replace") for p in results.rglob("*") if p.is_file())


@pytest.mark.docker
def test_a_run_on_docker_reaches_the_gateway_from_a_task_without_internet(upstream, base_image, tmp_path, cli):
    run_name = f"gwrun-{uuid.uuid4().hex[:8]}"
    done = cli(*probe_args(tmp_path, upstream.url, run_name, "--env", "docker"),
               env={"PYTHONPATH": os.pathsep.join([str(REPO), str(TESTS)])})
    assert done.returncode == 0, done.stderr[-3000:]
    (result,) = (tmp_path / "results" / run_name).glob("*/tasks/fix-median-bug/attempt-1/result.json")
    assert json.loads(result.read_text())["usage"]["model_calls"] == 2, (result.parent / "client.txt").read_text()
    left = subprocess.run(["docker", "network", "ls", "-q", "--filter", "label=run=" + run_name], capture_output=True, text=True)
    assert left.stdout.strip() == ""


def test_ctrl_c_with_a_stream_in_flight_ends_the_run(upstream, tmp_path):
    upstream.gate = threading.Event()  # never opened: the stream stays open until the run ends
    stderr = tmp_path / "stderr.txt"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(TESTS)])}
    args = probe_args(tmp_path, upstream.url, "ctrlc", "--env-params", '{"isolation": "none"}', mode="hang")
    proc = subprocess.Popen([sys.executable, "-m", "agentcompass", *args], env=env, stdout=subprocess.DEVNULL,
                            stderr=open(stderr, "w"))
    deadline = time.monotonic() + 60
    while not upstream.received:
        assert time.monotonic() < deadline and proc.poll() is None, stderr.read_text()[-2000:]
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"the run ignored SIGINT for 20 s: {stderr.read_text()[-3000:]}")
    assert proc.returncode == 130, stderr.read_text()[-2000:]
    assert "Traceback" not in stderr.read_text()


@pytest.mark.parametrize("settings, says", [
    (['--env-params={"isolation": "bwrap"}'], "has no internet, and on env local (bwrap) that leaves it no network"),
    (['--env-params={"isolation": "none"}', "run.gateway.public_url=ftp://tunnel"],
     "run.gateway.public_url 'ftp://tunnel' is not an http(s) URL"),
], ids=["offline-task-under-bwrap", "public-url-not-http"])
def test_a_gateway_the_sandboxes_cannot_reach_is_refused_before_the_run(tmp_path, cli, settings, says):
    if "bwrap" in settings[0] and not shutil.which("bwrap"):
        pytest.skip("bubblewrap is not installed")
    done = cli(*probe_args(tmp_path, "http://127.0.0.1:9", "refused", *settings),
               env={"PYTHONPATH": os.pathsep.join([str(REPO), str(TESTS)])})
    assert done.returncode == 2 and says in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "results").exists()


def test_a_remote_sandbox_gets_the_public_url_or_a_refusal(upstream, tmp_path):
    """modal and gcp sandboxes cannot reach this machine: they are given run.gateway.public_url (a tunnel)."""
    from agentcompass.core.errors import UserError

    model = ModelConfig(**{**GLM, "base_url": f"{upstream.url}/v1", "api_key": KEY})
    remote = object()  # any sandbox that is neither local nor docker
    with Gateway(model, "gwtest", GatewaySettings(public_url="https://tunnel.example/gw/")) as gateway:
        endpoint = gateway.endpoint(new_trial(tmp_path, "a"), remote)
        assert endpoint.openai_base_url == f"https://tunnel.example/gw/t/{endpoint.api_key}/v1"
        assert endpoint.anthropic_base_url == f"https://tunnel.example/gw/t/{endpoint.api_key}"
    with Gateway(model, "gwtest", GatewaySettings()) as gateway, pytest.raises(UserError, match="public_url"):
        gateway.endpoint(new_trial(tmp_path, "b"), remote)


# -- cost: each call's tokens x the model's price ------------------------------------------------
def litellm_prices(name: str) -> dict[str, float]:
    """The per-token prices of litellm's bundled map, read from the map itself (not through our pricing)."""
    from agentcompass.core.models import import_litellm

    return import_litellm().model_cost[name]


def test_each_call_is_priced_by_its_tokens_cache_writes_included(upstream, gateways, local_sandbox, tmp_path):
    """codex reports no cost, Claude Code and opencode their own estimates: every installed harness is priced the
    same way, from the gateway's calls. Anthropic's cache writes cost more than input; they are priced as such."""
    claude = yaml.safe_load((REPO / "conf/models/claude-sonnet-4-5.yaml").read_text())
    gpt = yaml.safe_load((REPO / "conf/models/gpt-5.5.yaml").read_text())
    for preset, path, price_name in [(gpt, "responses", "gpt-5.5"), (claude, "messages", "claude-sonnet-4-5-20250929")]:
        upstream.usages.clear()
        trial = new_trial(tmp_path, path.replace("/", "-"))
        endpoint = gateways(preset, upstream.url).endpoint(trial, local_sandbox)
        base = endpoint.openai_base_url if path == "responses" else f"{endpoint.anthropic_base_url}/v1"
        body = {"input": "hi"} if path == "responses" else {"max_tokens": 64, "messages": HELLO}
        headers = {"authorization": f"Bearer {endpoint.api_key}"}
        post(f"{base}/{path}", json=body, headers=headers).raise_for_status()
        stream_text(f"{base}/{path}", {**body, "stream": True}, **headers)
        p = litellm_prices(price_name)
        expected = []
        for u in upstream.usages:
            if path == "responses":
                cached = u["input_tokens_details"]["cached_tokens"]
                expected.append((u["input_tokens"] - cached) * p["input_cost_per_token"]
                                + cached * p["cache_read_input_token_cost"] + u["output_tokens"] * p["output_cost_per_token"])
            else:
                expected.append(u["input_tokens"] * p["input_cost_per_token"]
                                + u["cache_read_input_tokens"] * p["cache_read_input_token_cost"]
                                + u["cache_creation_input_tokens"] * p["cache_creation_input_token_cost"]
                                + u["output_tokens"] * p["output_cost_per_token"])
        rows = calls_of(trial)
        assert [r["cost_usd"] for r in rows] == pytest.approx(expected, rel=1e-9)
        assert [r["tokens_cache_write"] for r in rows] == [u.get("cache_creation_input_tokens", 0) for u in upstream.usages]
        assert endpoint.usage()["cost_usd"] == pytest.approx(sum(expected), rel=1e-9) and endpoint.usage()["cost_known"]
