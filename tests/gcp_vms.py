"""What the gcp tests share: a real sshd on 127.0.0.1 that plays every fake VM (its authorized_keys gets each
VM's key), the recording fake Compute client in place of the real one (tests/fake_gcp.py), a provider and a
sandbox spec aimed at them, and `gcp_cli`, the agentcompass CLI in a subprocess with the fake installed. Test
modules import the fixtures by name; every container they start carries the label run=RUN."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest

import fake_gcp
from agentcompass.core.sandbox import SandboxSpec
from conftest import IN_CI

TESTS = Path(__file__).resolve().parent
SSHD = "/usr/sbin/sshd"
RUN = f"pytest-gcp-{uuid.uuid4().hex[:8]}"  # the label of every container these tests start


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def sshd(tmp_path_factory, base_image):
    """A real sshd on 127.0.0.1 with a throwaway host key; the fake VMs' keys go to its authorized_keys."""
    if not os.path.exists(SSHD) or os.geteuid() != 0:
        reason = "needs openssh-server (apt-get install openssh-server) and root"
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)
    pytest.importorskip("paramiko")
    home = tmp_path_factory.mktemp("sshd")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(home / "host_key")], check=True)
    keys = home / "authorized_keys"
    keys.touch(mode=0o600)
    port = free_port()
    config = home / "sshd_config"
    config.write_text(f"Port {port}\nListenAddress 127.0.0.1\nHostKey {home / 'host_key'}\nPidFile {home / 'pid'}\n"
                      f"AuthorizedKeysFile {keys}\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
                      "UsePAM no\nPermitRootLogin prohibit-password\nStrictModes no\nMaxSessions 100\nMaxStartups 100\n")
    Path("/run/sshd").mkdir(exist_ok=True)
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stderr=subprocess.PIPE)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    yield {"port": port, "keys": str(keys)}
    proc.terminate()
    proc.wait(10)


@pytest.fixture
def fake(monkeypatch, sshd):
    """The fake Compute client in place of the real one; ADC answers with anonymous credentials."""
    pytest.importorskip("google.cloud.compute_v1")
    fake_gcp.reset()
    monkeypatch.setenv(fake_gcp.KEYS_ENV, sshd["keys"])
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    fake_gcp.install_into(monkeypatch)
    yield fake_gcp
    fake_gcp.destroy_all()
    subprocess.run(f"docker ps -aq --filter label=run={RUN} | xargs -r docker rm -f -v", shell=True, capture_output=True)


def settings(sshd, **more):
    return {"ssh_port": sshd["port"], "ssh_user": "root", "sudo": False, "boot_timeout_s": 120, **more}


def provider(sshd, **more):
    from agentcompass.providers.gcp.provider import GcpProvider

    return GcpProvider(**settings(sshd, **more))


def spec(name="t1", **kw) -> SandboxSpec:
    kw.setdefault("image", "agentcompass/base:bookworm")
    return SandboxSpec(name=f"ac-{RUN}-{name}", workdir="/app", labels={"agentcompass": "1", "run": RUN, "trial": f"{name}.1"},
                       **kw)


def calls(name: str) -> list[tuple]:
    return [c for c in fake_gcp.calls if c[0] == name]


def containers() -> list[str]:
    out = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=run={RUN}"], capture_output=True, text=True, check=True)
    return out.stdout.split()


def top(container: str) -> str:
    return subprocess.run(["docker", "top", container], capture_output=True, text=True).stdout


@pytest.fixture
def sandbox(fake, sshd):
    box = provider(sshd).open(spec())
    yield box
    box.close()


@pytest.fixture
def gcp_cli(cli, fake, sshd, tmp_path):
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text("import fake_gcp\nfake_gcp.install()\n")
    log = tmp_path / "sdk-calls.jsonl"
    base = {"PYTHONPATH": os.pathsep.join([str(shim), str(TESTS), os.environ.get("PYTHONPATH", "")]),
            fake_gcp.LOG_ENV: str(log), fake_gcp.KEYS_ENV: sshd["keys"]}
    params = json.dumps(settings(sshd))

    def run(*args: str, env: dict[str, str] | None = None):
        result = cli(*args, env={**base, **(env or {})})
        sdk = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        return result, sdk

    run.params, run.env = params, base
    return run
