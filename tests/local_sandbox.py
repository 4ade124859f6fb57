"""What the local provider's test modules share: the sandbox fixture, one per isolation, and a runner
process that opens a sandbox and runs one command."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from agentcompass.core.sandbox import SandboxSpec
from agentcompass.providers.local.provider import LocalProvider

HAS_BWRAP = shutil.which("bwrap") is not None
HAS_PASTA = shutil.which("pasta") is not None
ISOLATIONS = ["none", pytest.param("bwrap", marks=pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap not installed"))]


@pytest.fixture(params=ISOLATIONS)
def sandbox(request, tmp_path):
    provider = LocalProvider(isolation=request.param, root=str(tmp_path))
    box = provider.open(SandboxSpec(name="t", workdir="/app", allow_internet=False))
    yield box
    box.close()


# Peak RSS from VmHWM: ru_maxrss would carry over the forking parent's peak (Linux keeps it across exec),
# which is pytest's own size late in a long session, not this runner's.
RUNNER = """
import json, re, sys, threading
from agentcompass.providers.local.provider import LocalProvider
from agentcompass.core.sandbox import SandboxSpec
box = LocalProvider(isolation=sys.argv[1], root=sys.argv[2]).open(SandboxSpec(name="t"))
result = box.exec(sys.argv[3], timeout=120)
print(json.dumps({"exit_code": result.exit_code, "stdout_len": len(result.stdout), "stderr_len": len(result.stderr),
                  "tail": result.stdout[-300:], "peak_rss_kib": int(re.search(r"VmHWM:\\s+(\\d+)", open("/proc/self/status").read()).group(1))}))
"""


ECHO_SERVER = """
import socket, sys
server = socket.create_server((sys.argv[1], 0))
print(server.getsockname()[1], flush=True)
while True:
    client, _ = server.accept()
    client.sendall(b"hello from outside\\n")
    client.close()
"""


@contextmanager
def server_in_own_network_namespace() -> Iterator[tuple[str, int]]:
    """A TCP server (it greets and hangs up) in a network namespace made for the test, reached from the host
    over a veth pair on addresses the test assigns (198.18.0.0/15, the benchmarking range: no one's network).
    What an internet-enabled sandbox reaching it proves is outbound traffic, without touching a real network."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("a network namespace of the test's own needs root and iproute2")
    name = f"agcli{uuid.uuid4().hex[:6]}"  # interface names: at most 15 characters
    subnet = f"198.18.{random.randrange(256)}.{4 * random.randrange(64)}"
    base = subnet.rsplit(".", 1)
    host_side, inner = f"{base[0]}.{int(base[1]) + 1}", f"{base[0]}.{int(base[1]) + 2}"
    steps = [["ip", "netns", "add", name],
             ["ip", "link", "add", f"{name}h", "type", "veth", "peer", "name", f"{name}n", "netns", name],
             ["ip", "addr", "add", f"{host_side}/30", "dev", f"{name}h"], ["ip", "link", "set", f"{name}h", "up"],
             ["ip", "netns", "exec", name, "ip", "addr", "add", f"{inner}/30", "dev", f"{name}n"],
             ["ip", "netns", "exec", name, "ip", "link", "set", f"{name}n", "up"],
             ["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"]]
    server = None
    try:
        for step in steps:
            subprocess.run(step, check=True, capture_output=True)
        server = subprocess.Popen(["ip", "netns", "exec", name, sys.executable, "-c", ECHO_SERVER, inner],
                                  stdout=subprocess.PIPE, text=True)
        assert server.stdout is not None
        port = int(server.stdout.readline())
        yield inner, port
    finally:
        if server is not None:
            server.kill()
            server.wait()
        subprocess.run(["ip", "netns", "del", name], capture_output=True)  # takes the veth pair with it
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and subprocess.run(["ip", "link", "show", f"{name}h"], capture_output=True).returncode == 0:
            time.sleep(0.1)
