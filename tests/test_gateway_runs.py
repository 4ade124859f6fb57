"""The model gateway from sandboxes and runs: docker containers reach it with or without internet (a real engine),
a run starts and stops it, tiers across a sweep, Ctrl-C mid-stream, unreachable gateways refused, calls priced."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest
import yaml

from agentcompass.gateway.server import Gateway
from agentcompass.core.sandbox import SandboxSpec
from agentcompass.core.schema import GatewaySettings, ModelConfig
from agentcompass.core.context import TrialContext
from docker_networks import subnet_only_network as subnet_only_network_of
from gateway_upstream import KEY
from gateway_fixtures import GLM, HELLO, REPO, TESTS, calls_of, connects, new_trial, own_addresses, post, start_gateway
from gateway_fixtures import stream_text
from gateway_fixtures import gateways, local_sandbox, upstream  # noqa: F401 (fixtures)


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
    gateway = start_gateway(GLM, upstream.url)  # loopback: the container's address to this host is added on demand
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
        # It listens where containers reach this host, and on no address another machine could use.
        host = endpoint.openai_base_url.split("//")[1].split(":")[0]
        assert gateway.addresses == sorted(["127.0.0.1", host])
        assert [a for a in own_addresses() if a != host and connects(a, gateway.port)] == []
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
            httpx.get(f"{root}/v1/models", timeout=60)
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


@pytest.mark.skipif(not shutil.which("bwrap") or not shutil.which("pasta"), reason="installed by scripts/test.sh")
def test_a_run_under_bwrap_reaches_the_gateway_from_a_task_without_internet(upstream, tmp_path, cli):
    """The gateway's one port is forwarded into the offline sandbox's own network namespace (what else it cannot
    reach: tests/test_local_gateway_offline.py)."""
    done = cli(*probe_args(tmp_path, upstream.url, "gwbwrap", '--env-params={"isolation": "bwrap"}'),
               env={"PYTHONPATH": os.pathsep.join([str(REPO), str(TESTS)])})
    assert done.returncode == 0, done.stderr[-3000:]
    (result,) = (tmp_path / "results" / "gwbwrap").glob("*/tasks/fix-median-bug/attempt-1/result.json")
    assert json.loads(result.read_text())["usage"]["model_calls"] == 2, (result.parent / "client.txt").read_text()


@pytest.mark.parametrize("settings, says", [
    (['--env-params={"isolation": "none"}', "run.gateway.public_url=ftp://tunnel"],
     "run.gateway.public_url 'ftp://tunnel' is not an http(s) URL"),
], ids=["public-url-not-http"])
def test_a_gateway_the_sandboxes_cannot_reach_is_refused_before_the_run(tmp_path, cli, settings, says):
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
