"""The egress proxy of an allowlist task serves its own trial only, and tunnels only to the web's ports: a
container elsewhere on the provider's network is refused, as is a CONNECT to an allowed host's other ports."""

from __future__ import annotations

import subprocess

import pytest

from agentcompass.providers.docker.provider import DockerProvider

from docker_sandbox import inspect, open_sandbox, plain_context, unique  # noqa: F401 (fixtures)

pytestmark = pytest.mark.docker

# Prints the status line a proxy answers a CONNECT with: python3 connect.py PROXY_HOST TARGET
CONNECT = """\
import socket, sys
try:
    s = socket.create_connection((sys.argv[1], 8888), timeout=10)
    s.sendall(("CONNECT %s HTTP/1.1\\r\\nHost: %s\\r\\n\\r\\n" % (sys.argv[2], sys.argv[2])).encode())
    print(s.recv(200).split(b"\\r\\n")[0].decode() or "closed")
except OSError as exc:
    print("unreachable", exc)
"""


@pytest.fixture
def provider(base_image):
    """On the engine's shared default bridge, where any container can reach the proxy's address: what keeps a
    foreign client out there is the proxy's own rule, not the network."""
    return DockerProvider(network="bridge")


def test_the_proxy_serves_only_its_trial_and_only_web_ports(open_sandbox, base_image, tmp_path):
    script = tmp_path / "connect.py"
    script.write_text(CONNECT)
    box = open_sandbox(network_modes=("allowlist",), allow_internet=False)
    box.set_network("allowlist", ("localhost",))
    box.upload(script, "/tmp/connect.py")

    def from_trial(target: str) -> str:
        return box.exec(f"python3 /tmp/connect.py egress {target}", timeout=60).stdout.strip()

    # the trial's own CONNECT to an allowed host's web port goes through (nothing listens on the proxy's own
    # port 443: an error from the far side, not a refusal); to any other port of that host it is refused
    through = from_trial("localhost:443")
    assert through.startswith("HTTP/") and " 403 " not in through, through
    assert " 403 " in from_trial("localhost:8888")
    # someone else's container on the same network, at the proxy's address: refused
    proxy = inspect(f"{box.spec.name}-egress")["NetworkSettings"]["Networks"]["bridge"]["IPAddress"]
    foreign = subprocess.run(["docker", "run", "--rm", "--label", "agentcompass-test=1", "-v", f"{script}:/connect.py:ro",
                              base_image, "python3", "/connect.py", proxy, "localhost:443"],
                             capture_output=True, text=True, timeout=120).stdout.strip()
    assert " 403 " in foreign, foreign  # tinyproxy's "Access denied": its rule, not the network, kept it out
