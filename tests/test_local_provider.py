"""The local provider: workspace mapping, timeouts that kill process groups, bwrap isolation."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path

import pytest

from agentcompass.errors import UserError
from agentcompass.providers.local import REMOVER, LocalProvider
from agentcompass.sandbox import SandboxSpec

HAS_BWRAP = shutil.which("bwrap") is not None
ISOLATIONS = ["none", pytest.param("bwrap", marks=pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap not installed"))]


@pytest.fixture(params=ISOLATIONS)
def sandbox(request, tmp_path):
    provider = LocalProvider(isolation=request.param, root=str(tmp_path))
    box = provider.open(SandboxSpec(name="t", workdir="/app", allow_internet=False))
    yield box
    box.close()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is dead for our purpose.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_workdir_maps_onto_the_workspace(sandbox):
    result = sandbox.exec("pwd && echo hello > note.txt && cat /app/note.txt")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines()[1] == "hello"
    assert (sandbox.host_path("/app") / "note.txt").read_text() == "hello\n"


def test_upload_download_roundtrip(sandbox, tmp_path):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "a.txt").write_text("A")
    (src / "run.sh").write_text("echo from-script\n")
    sandbox.upload(src, "/tests")
    result = sandbox.exec("bash /tests/run.sh && cat /tests/sub/a.txt")
    assert result.stdout == "from-script\nA"
    sandbox.exec("mkdir -p /logs/verifier && echo 0.5 > /logs/verifier/reward.txt")
    sandbox.download("/logs/verifier", tmp_path / "out")
    assert (tmp_path / "out" / "reward.txt").read_text().strip() == "0.5"
    with pytest.raises(FileNotFoundError):
        sandbox.download("/logs/nothing-here", tmp_path / "missing")


def test_timeout_kills_the_whole_process_group(sandbox):
    start = time.monotonic()
    # The command starts a grandchild that would outlive a naive kill of the shell.
    result = sandbox.exec("sleep 313.7 & echo $! > /app/child.pid; wait", timeout=1.5)
    assert result.timed_out and result.exit_code == 124
    assert time.monotonic() - start < 20
    pid_text = (sandbox.host_path("/app") / "child.pid").read_text().strip()
    if sandbox.isolation == "none":  # with bwrap the pid is in another pid namespace
        deadline = time.monotonic() + 5
        while alive(int(pid_text)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(int(pid_text))
    assert "sleep 313.7" not in os.popen("ps -eo args").read()


def test_close_kills_running_commands_and_removes_workspace(sandbox):
    thread = threading.Thread(target=lambda: sandbox.exec("sleep 120"))
    thread.start()
    time.sleep(0.5)
    sandbox.close()
    thread.join(timeout=10)
    assert not thread.is_alive()
    REMOVER.drain()  # workspaces are removed in the background, and always before exit
    assert not sandbox.workspace.exists()
    sandbox.close()  # idempotent


def test_env_is_clean_and_task_env_applies(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-must-not-leak")
    provider = LocalProvider(isolation="none", root=str(tmp_path))
    box = provider.open(SandboxSpec(name="t", env={"TASK_VAR": "1"}))
    try:
        out = box.exec("env", env={"CALL_VAR": "2"}).stdout
    finally:
        box.close()
    assert "OPENAI_API_KEY" not in out
    assert "TASK_VAR=1" in out and "CALL_VAR=2" in out


@pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap not installed")
def test_bwrap_blocks_writes_outside_the_workspace(tmp_path):
    # Not under /tmp: the sandbox has a private /tmp, so that would not test the read-only root.
    outside = Path(tempfile.mkdtemp(dir="/var/tmp"))
    provider = LocalProvider(isolation="bwrap", root=str(tmp_path / "ws"))
    box = provider.open(SandboxSpec(name="t"))
    try:
        result = box.exec(f"echo x > {outside}/escape.txt")
        tmp_result = box.exec("echo y > /tmp/private.txt && ls /tmp")
    finally:
        box.close()
    escaped = (outside / "escape.txt").exists()
    shutil.rmtree(outside)
    assert result.exit_code != 0
    assert "Read-only file system" in result.stderr
    assert not escaped
    assert tmp_result.exit_code == 0 and tmp_result.stdout.split() == ["private.txt"]


@pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap not installed")
def test_bwrap_blocks_network_unless_allowed(tmp_path):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    probe = f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=3); print('connected')\""
    try:
        provider = LocalProvider(isolation="bwrap", root=str(tmp_path))
        closed = provider.open(SandboxSpec(name="a", allow_internet=False))
        opened = provider.open(SandboxSpec(name="b", allow_internet=True))
        try:
            blocked = closed.exec(probe, timeout=30)
            allowed = opened.exec(probe, timeout=30)
        finally:
            closed.close()
            opened.close()
    finally:
        server.close()
    assert blocked.exit_code != 0 and "connected" not in blocked.stdout
    assert allowed.exit_code == 0 and "connected" in allowed.stdout


def test_task_needing_an_image_names_env_docker(tmp_path):
    provider = LocalProvider(isolation="none", root=str(tmp_path))
    with pytest.raises(UserError, match="--env docker"):
        provider.check(SandboxSpec(name="needs-image", image="python:3.12"))
    provider.check(SandboxSpec(name="host-ok", image="python:3.12", runs_on_host=True))


def test_bwrap_requested_without_bubblewrap(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(UserError, match="bubblewrap"):
        LocalProvider(isolation="bwrap")
