"""The local provider: workspace mapping, files, bwrap isolation, lost sandboxes and the secrets it
keeps out. How its commands' processes end is in test_local_processes.py."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest
import structlog

from agentcompass.core.errors import InfraError, SandboxLost, UserError
from agentcompass.providers.local.binds import python_environment
from agentcompass.providers.local.provider import REMOVER, LocalProvider, LocalSandbox
from agentcompass.core.sandbox import SandboxSpec
from conftest import IN_CI, REPO, make_venv
from harbor_factory import make_recipe, make_task
from local_sandbox import HAS_BWRAP, HAS_PASTA, RUNNER, sandbox, server_in_own_network_namespace  # noqa: F401 (a fixture)

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
    # Not under /tmp: the sandbox has a private /tmp, so that would not test the host.
    outside = Path(tempfile.mkdtemp(dir="/var/tmp"))
    provider = LocalProvider(isolation="bwrap", root=str(tmp_path / "ws"))
    box = provider.open(SandboxSpec(name="t"))
    shown = Path(tempfile.mkdtemp(prefix="agentcompass-test-", dir="/usr/local"))  # a folder the sandbox does see
    try:
        hidden = box.exec(f"echo x > {outside}/escape.txt")
        seen = box.exec(f"echo x > {shown}/escape.txt")
        top = box.exec("echo x > /escape.txt")
        tmp_result = box.exec("echo y > /tmp/private.txt && ls /tmp")
    finally:
        box.close()
        escaped = [p for p in (outside / "escape.txt", shown / "escape.txt") if p.exists()]
        shutil.rmtree(outside)
        shutil.rmtree(shown)
    assert hidden.exit_code != 0 and "No such file or directory" in hidden.stderr  # /var is not there at all
    assert seen.exit_code != 0 and "Read-only file system" in seen.stderr
    assert top.exit_code != 0 and "Read-only file system" in top.stderr
    assert not escaped
    # The sandbox's /tmp is its own: what it wrote, plus (read-only) the Python environment
    # agentcompass runs from when that lives under /tmp, as in CI's fresh venv.
    python_under_tmp = {Path(p).parts[2] for p in python_environment() if Path(p).parts[1:2] == ("tmp",)}
    assert tmp_result.exit_code == 0 and set(tmp_result.stdout.split()) == {"private.txt"} | python_under_tmp


@pytest.mark.skipif(not HAS_BWRAP or not HAS_PASTA, reason="bubblewrap or pasta (passt) not installed")
def test_bwrap_blocks_network_unless_allowed(tmp_path):
    """Without internet no network at all; with it, outbound through pasta to a server outside this host's
    own network namespace (one the test makes). The host's loopback is out of reach either way: see
    test_local_attacks.py."""
    probe = "python3 -c \"import socket, sys; print(socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5).recv(64).decode())\" {} {}"
    with server_in_own_network_namespace() as (address, port):
        provider = LocalProvider(isolation="bwrap", root=str(tmp_path))
        closed = provider.open(SandboxSpec(name="a", allow_internet=False))
        opened = provider.open(SandboxSpec(name="b", allow_internet=True))
        try:
            blocked = closed.exec(probe.format(address, port), timeout=30)
            allowed = opened.exec(probe.format(address, port), timeout=30)
        finally:
            closed.close()
            opened.close()
    assert blocked.exit_code != 0 and "hello from outside" not in blocked.stdout
    assert allowed.exit_code == 0 and "hello from outside" in allowed.stdout, allowed


def test_task_needing_an_image_names_env_docker(tmp_path):
    provider = LocalProvider(isolation="none", root=str(tmp_path))
    with pytest.raises(UserError, match="--env docker"):
        provider.check(SandboxSpec(name="needs-image", image="python:3.12"))
    provider.check(SandboxSpec(name="host-ok", image="python:3.12", runs_on_host=True))


def test_bwrap_requested_without_bubblewrap(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(UserError, match="bubblewrap"):
        LocalProvider(isolation="bwrap")


# -- the interpreter a user runs from stays visible, wherever it lives (issue 8.1) -------------------

@pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap not installed")
@pytest.mark.parametrize("where", ["/tmp", "$HOME"])
def test_the_python_environment_agentcompass_runs_from_is_visible(tmp_path, where):
    scratch = Path(tempfile.mkdtemp(prefix="agentcompass-venv-", dir="/tmp" if where == "/tmp" else "/var/tmp"))
    home = scratch if where == "$HOME" else Path(os.environ.get("HOME", "/root"))
    try:
        (scratch / ".secret").write_text("x")
        python = make_venv(scratch / "venv", with_pip=False)
        # The sandbox runs the venv's interpreter by its path, as a task pointed at $PYTHON does.
        cmd = f"{python} -c 'import sys; print(sys.prefix)' && ls -A {scratch}"
        done = subprocess.run([str(python), "-c", RUNNER, "bwrap", str(tmp_path / "ws"), cmd], capture_output=True,
                              text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO), "HOME": str(home)})
    finally:
        shutil.rmtree(scratch)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["exit_code"] == 0, report
    prefix, *listing = report["tail"].split()
    assert prefix == str(scratch / "venv")
    assert ".secret" not in listing  # /tmp is the sandbox's own, $HOME is hidden: only the venv shows


# -- a sandbox lost under the trial is an infra error; the command's own end is its own (issue 8.3) --

def start_in_thread(box, cmd: str) -> tuple[threading.Thread, dict]:
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["result"] = box.exec(cmd, timeout=60)
        except Exception as exc:  # noqa: BLE001 - the test inspects what was raised
            outcome["error"] = exc
    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 10
    while not box._commands and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)  # let bwrap set the namespace up
    return thread, outcome


@pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap not installed")
def test_a_sandbox_killed_from_outside_is_sandbox_lost(tmp_path):
    box = LocalProvider(isolation="bwrap", root=str(tmp_path)).open(SandboxSpec(name="t"))
    try:
        thread, outcome = start_in_thread(box, "sleep 30")
        (command,) = box._commands
        # Another process kills the sandbox's process group, as an OOM killer or an operator would.
        # (Not with procps' `kill -KILL -PGID`: some versions read that as -1, every process.)
        assert command.proc.pid > 1
        subprocess.run([sys.executable, "-c", "import os, signal, sys; os.killpg(int(sys.argv[1]), signal.SIGKILL)",
                        str(command.proc.pid)], check=True)
        thread.join(10)
        assert isinstance(outcome.get("error"), SandboxLost), outcome
        assert isinstance(outcome["error"], InfraError)  # retried like any infra failure
        own = box.exec("kill -KILL $$")  # the command killing itself is its own exit status
        assert own.exit_code == 128 + signal.SIGKILL and not own.timed_out
        timed = box.exec("sleep 30", timeout=1)  # our timeout is a timeout, not a lost sandbox
        assert timed.timed_out and timed.exit_code == 124
    finally:
        box.close()


def test_a_vanished_workspace_is_sandbox_lost(sandbox):
    shutil.rmtree(sandbox.workspace)
    with pytest.raises(SandboxLost, match="vanished"):
        sandbox.exec("true")
    with pytest.raises(SandboxLost):
        sandbox.download("/logs/verifier", sandbox.workspace.parent / "out")


def test_a_failed_workspace_removal_is_logged_with_its_path(tmp_path):
    blocker = tmp_path / "not-a-dir"  # rmtree of a file fails
    blocker.write_text("x")
    with structlog.testing.capture_logs() as logs:
        REMOVER.remove(blocker)
        REMOVER.drain()
    assert [entry["path"] for entry in logs if entry["log_level"] == "warning"] == [str(blocker)]


# -- the local sandbox keeps the user's secrets out (issue 8.7) -------------------------------------

ESCAPE_SOLUTION = """\
r=/logs/verifier/escape-report.txt
attempt() {{ echo "attempt $1" >> $r; }}
for f in {secrets}; do attempt "read $f"; cat "$f" >> $r 2>&1 && echo "read: $f" >> $r; done
for d in {writable}; do attempt "write $d"; echo x > "$d/escape.txt" 2>> $r && echo "wrote: $d" >> $r; done
attempt network; (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>> $r && echo "network: connected" >> $r
attempt signal; kill -TERM {victim} 2>> $r && echo "signal: delivered" >> $r
true
"""


@pytest.mark.skipif(not HAS_BWRAP and not IN_CI, reason="bubblewrap not installed")
def test_a_task_cannot_read_secrets_write_outside_reach_the_network_or_signal_the_host(cli, tmp_path):
    token = f"SECRET-{uuid.uuid4().hex}"
    scratch = Path(tempfile.mkdtemp(prefix="agentcompass-escape-", dir="/var/tmp"))  # not /tmp: that is private anyway
    home, listed, outside = scratch / "home", scratch / "listed", scratch / "outside"
    for folder in (home / ".config" / "x", listed, outside):
        folder.mkdir(parents=True)
    secrets = [home / ".config" / "x" / "creds.json", listed / "token.txt"]
    root_secret = Path("/root/.config") / f"agentcompass-test-{uuid.uuid4().hex}" / "creds.json"
    if os.geteuid() == 0:  # root's own home is hidden too, whatever $HOME says
        secrets.append(root_secret)
    for secret in secrets:
        secret.parent.mkdir(parents=True, exist_ok=True)
        secret.write_text(json.dumps({"token": token}))
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    accepted: list[object] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except OSError:
                pass
    acceptor = threading.Thread(target=accept)
    acceptor.start()
    victim = subprocess.Popen(["sleep", "300"])
    try:
        data = tmp_path / "data"
        task = make_task(data, "escape", test="echo 1 > /logs/verifier/reward.txt", solve=ESCAPE_SOLUTION.format(
            secrets=" ".join(map(str, secrets)), writable=f"{outside} {home}", port=server.getsockname()[1],
            victim=victim.pid))
        with (task / "task.toml").open("a") as toml:
            toml.write("allow_internet = false\n")  # the [environment] table is the file's last
        make_recipe(tmp_path / "conf", "escape", data)
        done = cli("run", "escape", "oracle", "none", "--config-dir", str(tmp_path / "conf"),
                   "--env-params", json.dumps({"isolation": "bwrap", "hide": [str(listed)]}),
                   "--results-dir", str(tmp_path / "r"), "--run-name", "e", env={"HOME": str(home)})
        assert done.returncode == 0, done.stderr
        attempt = tmp_path / "r" / "e" / "escape__oracle__none__local" / "tasks" / "escape" / "attempt-1"
        report = (attempt / "verifier" / "escape-report.txt").read_text()
        victim_alive = victim.poll() is None
        wrote = [d for d in (outside, home) if (d / "escape.txt").exists()]
    finally:
        stop.set()
        acceptor.join()
        server.close()
        victim.kill()
        victim.wait()
        shutil.rmtree(scratch)
        shutil.rmtree(root_secret.parent, ignore_errors=True)
    # The script ran every attempt (so the checks below are about the sandbox, not a broken script)...
    assert report.count("attempt ") == len(secrets) + 2 + 2, report
    # ...and each failed, seen from the host where it matters.
    assert "read: " not in report and token not in report, report
    leaked = [p for p in (tmp_path / "r").rglob("*") if p.is_file() and token in p.read_text(errors="replace")]
    assert not leaked, leaked
    assert wrote == [], report
    assert accepted == [], report
    assert "network: connected" not in report
    assert victim_alive and "signal: delivered" not in report, report


@pytest.mark.parametrize("params, complaint", [
    ({"isolation": "none", "hide": ["/srv/secrets"]}, "hides nothing"),
    ({"hide": ["relative/path"]}, "not an absolute path"),
    ({"hide": ["/"]}, "whole host"),
])
def test_bad_hide_settings_are_one_line_user_errors(cli, tmp_path, params, complaint):
    if params.get("isolation") != "none" and not HAS_BWRAP:
        pytest.skip("the hide list is read only when bubblewrap isolates")
    done = cli("run", "demo", "oracle", "none", "--env-params", json.dumps(params), "--results-dir", str(tmp_path / "r"))
    assert done.returncode == 2, done.stderr
    assert complaint in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "r").exists()


# -- bubblewrap that cannot set the sandbox up: the command never ran (a host mount changing under a bind) --

FLAKY_BWRAP = """#!/bin/sh
n=$(cat {count} 2>/dev/null || echo 0); echo $((n + 1)) > {count}
if [ "$n" -lt {fail} ]; then
  echo "bwrap: Can't bind mount /oldroot/var on /newroot/var: Unable to apply mount flags: Invalid argument" >&2; exit 1
fi
exec {bwrap} "$@"
"""


def flaky_bwrap(monkeypatch, tmp_path, fail: int) -> Path:
    """bubblewrap that fails its set-up `fail` times, as a docker container's mount under /var makes it do."""
    count, script = tmp_path / "count", tmp_path / "bwrap"
    script.write_text(FLAKY_BWRAP.format(count=count, fail=fail, bwrap=shutil.which("bwrap")))
    script.chmod(0o755)
    real = LocalSandbox._bwrap_argv
    monkeypatch.setattr(LocalSandbox, "_bwrap_argv", lambda self, cwd: [str(script), *real(self, cwd)[1:]])
    return count


@pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap not installed")
def test_a_bwrap_set_up_failure_is_tried_again_and_never_read_as_the_commands_exit(monkeypatch, tmp_path):
    count = flaky_bwrap(monkeypatch, tmp_path, fail=2)
    box = LocalProvider(isolation="bwrap", root=str(tmp_path / "ws")).open(SandboxSpec(name="t", workdir="/app"))
    try:
        ran = box.exec("echo ran; exit 3")
        # what the command prints is its own, even bwrap's words: exit 1, not an infra error
        mimic = box.exec("echo \"bwrap: Can't bind mount /oldroot/var on /newroot/var\" >&2; exit 1")
    finally:
        box.close()
    assert (ran.exit_code, ran.stdout.strip(), count.read_text().strip()) == (3, "ran", "4")
    assert mimic.exit_code == 1 and "bwrap:" in mimic.stderr


@pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap not installed")
def test_a_bwrap_that_never_sets_up_is_an_infra_error(monkeypatch, tmp_path):
    flaky_bwrap(monkeypatch, tmp_path, fail=100)
    box = LocalProvider(isolation="bwrap", root=str(tmp_path / "ws")).open(SandboxSpec(name="t", workdir="/app"))
    try:
        with pytest.raises(InfraError, match="bubblewrap could not set the sandbox up: bwrap: Can't bind mount"):
            box.exec("echo never")
    finally:
        box.close()
