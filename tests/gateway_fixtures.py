"""What the gateway's test modules share: a scripted upstream, gateways started for presets and stopped after,
a local sandbox, trials, and helpers to post and stream."""

from __future__ import annotations

import json
import socket
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


@pytest.fixture(params=[False, True], ids=["offline", "online"])
def sandbox(request):
    """A local sandbox of a task without internet, then of one with it."""
    made = LocalProvider(isolation="none").open(SandboxSpec(name=f"gwp-{uuid.uuid4().hex[:8]}", workdir="/app",
                                                             allow_internet=request.param))
    yield made
    made.close()


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


def own_addresses() -> list[str]:
    """This machine's IPv4 addresses other than loopback, one per interface (the kernel's SIOCGIFADDR)."""
    import fcntl
    import struct

    found = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _, name in socket.if_nameindex():
            try:
                raw = fcntl.ioctl(probe.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))  # SIOCGIFADDR
            except OSError:  # no IPv4 address on it
                continue
            address = socket.inet_ntoa(raw[20:24])
            if not address.startswith("127."):
                found.append(address)
    return found


def connects(host: str, port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(5)
        return probe.connect_ex((host, port)) == 0
