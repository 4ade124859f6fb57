"""The docker provider's interrupts and cleanup: every container closed on a signal, leftovers of killed runs removed,
siblings' containers never touched."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentcompass.core.errors import InfraError
from agentcompass.core.sandbox import SandboxSpec

from docker_sandbox import (  # noqa: F401 (fixtures)
    containers, inspect, open_sandbox, plain_context, provider, unique, write_recipe, write_task)

pytestmark = pytest.mark.docker


# -- interrupts and cleanup ---------------------------------------------------------------------------
@pytest.fixture
def slow_bench(base_image, tmp_path) -> Path:
    """Four tasks whose solution sleeps: trials are surely running when we interrupt."""
    dataset, config_dir = tmp_path / "data", tmp_path / "conf"
    for i in range(4):
        write_task(dataset, f"slow-{i}", f"FROM {base_image}\nWORKDIR /app\n", solve="sleep 120")
    write_recipe(config_dir, "slowbench", dataset)
    return config_dir


def start_run(config_dir: Path, results: Path, run_name: str, wait: bool = True) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentcompass", "run", "slowbench", "oracle", "none", "--env", "docker",
         "--config-dir", str(config_dir), "--results-dir", str(results), "--run-name", run_name,
         "--task-concurrency", "4"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if not wait:
        return proc
    deadline = time.monotonic() + 120
    while len(containers(f"run={run_name}")) < 4:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "trials did not start"
        time.sleep(0.1)
    return proc


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupt_closes_every_container(slow_bench, tmp_path, sig):
    run_name = unique(sig.name.lower())
    proc = start_run(slow_bench, tmp_path / "out", run_name)
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert containers(f"run={run_name}") == []


def test_cleanup_removes_what_a_killed_run_left(cli, slow_bench, tmp_path):
    run_name = unique("sigkill")
    proc = start_run(slow_bench, tmp_path / "out", run_name)
    proc.kill()
    proc.communicate()
    assert len(containers(f"run={run_name}")) == 4
    cleaned = cli("cleanup", "--env", "docker", "--run-name", run_name)
    assert cleaned.returncode == 0, cleaned.stderr
    assert "removed 4" in cleaned.stdout
    assert containers(f"run={run_name}") == []


def test_sigkill_at_random_instants_then_cleanup_leaves_nothing(cli, slow_bench, tmp_path):
    """Issue 8.6, docker: SIGKILLed at random instants (opening, building, running), each time resumed
    under the same name (which replaces the dead process's containers), then cleaned up: nothing left."""
    run_name = unique("sigkill-random")
    for _ in range(3):
        proc = start_run(slow_bench, tmp_path / "out", run_name, wait=False)
        time.sleep(random.uniform(0.5, 4.0))
        proc.kill()
        proc.communicate()
    # Resumed once more: every trial's container is now this process's, the dead ones' were replaced.
    proc = start_run(slow_bench, tmp_path / "out", run_name, wait=False)
    owners = ["docker", "ps", "--filter", f"label=run={run_name}", "--format", '{{.Label "agentcompass.owner"}}']
    deadline = time.monotonic() + 120
    while [o.split("/")[1] for o in subprocess.run(owners, capture_output=True, text=True).stdout.split()] != [str(proc.pid)] * 4:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    proc.kill()
    proc.communicate()
    cleaned = cli("cleanup", "--env", "docker", "--run-name", run_name)
    assert cleaned.returncode == 0, cleaned.stderr
    assert containers(f"run={run_name}") == []


def test_a_stale_container_of_the_same_trial_is_replaced(open_sandbox, plain_context):
    """Rerunning a killed run under its name meets the old trial's container name: it is replaced."""
    from agentcompass.providers.docker.provider import DockerProvider

    name = unique("ac-test")
    subprocess.run(["docker", "create", "--name", name, "--label", "agentcompass=1", "agentcompass/base:bookworm"],
                   capture_output=True, check=True)
    box = DockerProvider().open(SandboxSpec(name=name, build_context=plain_context))
    try:
        assert box.exec("echo fresh").stdout == "fresh\n"
    finally:
        box.close()
    assert subprocess.run(["docker", "inspect", name], capture_output=True).returncode != 0


def test_a_live_siblings_container_is_never_removed(plain_context):
    """Two processes with one run name: the second's trial must not remove the first's live container."""
    from agentcompass.providers.docker.provider import DockerProvider

    spec = SandboxSpec(name=unique("ac-test"), build_context=plain_context,
                       labels={"agentcompass": "1", "run": "pytest-docker", "trial": "t.1"})
    sibling = DockerProvider().open(spec)  # another provider: another, live, owner
    try:
        with pytest.raises(InfraError, match="held by a live container"):
            DockerProvider().open(spec)
        assert sibling.exec("echo alive").stdout == "alive\n"
    finally:
        sibling.close()


def test_a_dead_processs_running_leftover_is_replaced(base_image, plain_context):
    from agentcompass.providers.docker.provider import DockerProvider
    from agentcompass.providers.remote import OWNER_LABEL, process_owner

    child = subprocess.Popen(["sleep", "30"])
    dead_owner = process_owner("x", child.pid)
    child.kill()
    child.wait()
    name, labels = unique("ac-test"), {"agentcompass": "1", "run": "pytest-docker", "trial": "t.1"}
    subprocess.run(["docker", "run", "-d", "--name", name, *[f"--label={k}={v}" for k, v in labels.items()],
                    f"--label={OWNER_LABEL}={dead_owner}", base_image, "sleep", "300"], capture_output=True, check=True)
    box = DockerProvider().open(SandboxSpec(name=name, build_context=plain_context, labels=labels))
    try:
        assert box.exec("echo fresh").stdout == "fresh\n"
        assert inspect(name)["Config"]["Labels"][OWNER_LABEL] != dead_owner
    finally:
        box.close()


def test_keep_environment_keeps_the_container_and_says_how_to_attach(cli, base_image, tmp_path):
    run_name = unique("keep")
    run = cli("run", "demo", "oracle", "none", "--env", "docker", "run.keep_environment=true",
              "--benchmark-params", '{"sample_ids": ["fix-median-bug"]}',
              "--results-dir", str(tmp_path), "--run-name", run_name)
    assert run.returncode == 0, run.stderr
    (kept,) = containers(f"run={run_name}")
    assert f"docker exec -it ac-{run_name}-fix-median-bug-1" in run.stdout
    assert inspect(kept)["State"]["Running"]
    cleaned = cli("cleanup", "--env", "docker", "--run-name", run_name)
    assert cleaned.stdout.startswith("removed 1 ")
    assert containers(f"run={run_name}") == []
