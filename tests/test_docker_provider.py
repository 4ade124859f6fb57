"""The docker provider on a real engine: the demo as a user runs it, container limits and network, exec, files."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from agentcompass.core.sandbox import TRUNCATION_MARK

from docker_sandbox import RUN_LABEL, containers, inspect, open_sandbox, plain_context, provider, unique  # noqa: F401 (fixtures)

pytestmark = pytest.mark.docker


# -- the demo benchmark, as a user runs it --------------------------------------------------
@pytest.mark.parametrize("harness", ["oracle", "nop"])
def test_demo_gives_the_same_results_as_local(cli, base_image, tmp_path, harness):
    run_name = unique("demo")
    statuses = {}
    for env in ("local", "docker"):
        run = cli("run", "demo", harness, "none", "--env", env, "--results-dir", str(tmp_path), "--run-name", run_name)
        assert run.returncode == 0, run.stderr
        trials = (tmp_path / run_name / f"demo__{harness}__none__{env}" / "trials.jsonl").read_text().splitlines()
        statuses[env] = {json.loads(line)["task_id"]: json.loads(line)["status"] for line in trials}
    assert len(statuses["docker"]) == 6
    assert statuses["docker"] == statuses["local"]
    assert set(statuses["docker"].values()) == ({"passed"} if harness == "oracle" else {"failed"})
    assert containers(f"run={run_name}") == []


# -- containers --------------------------------------------------------------------------------
def test_container_gets_limits_labels_workdir_and_env(open_sandbox):
    box = open_sandbox(workdir="/work/here", cpus=1, memory_mb=256, env={"GREETING": "hi"})
    info = inspect(box.spec.name)
    assert info["HostConfig"]["NanoCpus"] == 1_000_000_000
    assert info["HostConfig"]["Memory"] == 256 * 1024 * 1024
    assert info["Config"]["Labels"]["agentcompass"] == "1"
    assert info["Config"]["Labels"]["run"] == RUN_LABEL
    assert info["State"]["Running"]
    result = box.exec("pwd; echo $GREETING; cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes")
    assert result.stdout.split() == ["/work/here", "hi", str(256 * 1024 * 1024)]
    assert box.has_task_image


def test_settings_override_the_task_limits(base_image, open_sandbox):
    from agentcompass.providers.docker.provider import DockerProvider

    box = open_sandbox(DockerProvider(cpu=0.5, memory=300), cpus=1, memory_mb=256)
    host = inspect(box.spec.name)["HostConfig"]
    assert (host["NanoCpus"], host["Memory"]) == (500_000_000, 300 * 1024 * 1024)
    assert DockerProvider.Settings(cpus=0.5, memory_mb=300) == DockerProvider.Settings(cpu=0.5, memory=300)  # aliases


def test_an_entrypoint_that_exits_gives_way_to_the_keep_alive(base_image, open_sandbox, tmp_path):
    """Harbor would find no container; the task still runs (docs/deliberate-differences.md)."""
    context = tmp_path / "entry"
    context.mkdir()
    (context / "Dockerfile").write_text(f'FROM {base_image}\nENTRYPOINT ["/bin/false"]\n')
    box = open_sandbox(build_context=context)
    assert box.exec("echo alive").stdout == "alive\n"


def test_network_none_when_the_task_disallows_internet(open_sandbox):
    offline = open_sandbox(allow_internet=False)
    online = open_sandbox(allow_internet=True)
    assert inspect(offline.spec.name)["HostConfig"]["NetworkMode"] == "none"
    assert offline.exec("ls /sys/class/net").stdout.split() == ["lo"]
    assert "eth0" in online.exec("ls /sys/class/net").stdout.split()
    probe = "python3 -c 'import socket; socket.create_connection((\"172.17.0.1\", 9), timeout=3)'"
    assert "Network is unreachable" in offline.exec(probe).stderr


# -- exec ------------------------------------------------------------------------------------------
def test_exec_returns_exit_code_and_both_streams(open_sandbox):
    box = open_sandbox()
    result = box.exec("echo out; echo err >&2; exit 7", env={"X": "1"}, cwd="/tmp")
    assert (result.exit_code, result.stdout, result.stderr, result.timed_out) == (7, "out\n", "err\n", False)
    assert box.exec("pwd").stdout == "/app\n"


def test_timeout_kills_the_command_inside_the_container(open_sandbox):
    box = open_sandbox()
    started = time.monotonic()
    result = box.exec("sleep 301 & setsid sleep 302 & sleep 303; echo never", timeout=1.5)
    assert result.timed_out and result.exit_code == 124
    assert "never" not in result.stdout
    assert time.monotonic() - started < 60  # cut at the timeout, not the command's 303 s
    left = box.exec("ps -eo args").stdout
    assert "sleep 30" not in left, left


def test_output_is_capped_and_marked(base_image, open_sandbox):
    from agentcompass.providers.docker.provider import DockerProvider

    box = open_sandbox(DockerProvider(output_cap_bytes=1000))
    result = box.exec("head -c 5000 /dev/zero | tr '\\0' a; head -c 3000 /dev/zero | tr '\\0' b >&2")
    assert result.stdout == "a" * 1000 + TRUNCATION_MARK
    assert result.stderr == "b" * 1000 + TRUNCATION_MARK
    assert box.exec("echo short").stdout == "short\n"


# -- files --------------------------------------------------------------------------------------------
def test_upload_and_download_files_and_directories(open_sandbox, tmp_path):
    box = open_sandbox()
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "a.txt").write_text("A")
    (src / "run.sh").write_text("echo from-script\n")
    box.upload(src, "/tests")
    box.upload(src / "sub" / "a.txt", "/deep/new/dir/b.txt")
    assert box.exec("bash /tests/run.sh && cat /tests/sub/a.txt /deep/new/dir/b.txt").stdout == "from-script\nAA"
    box.exec("mkdir -p /logs/verifier && echo 0.5 > /logs/verifier/reward.txt")
    box.download("/logs/verifier", tmp_path / "out")
    box.download("/tests/sub/a.txt", tmp_path / "single.txt")
    assert (tmp_path / "out" / "reward.txt").read_text() == "0.5\n"
    assert (tmp_path / "single.txt").read_text() == "A"
    with pytest.raises(FileNotFoundError):
        box.download("/no/such/path", tmp_path / "missing")


def test_close_removes_the_container_and_is_idempotent(open_sandbox):
    box = open_sandbox()
    box.close()
    box.close()
    assert subprocess.run(["docker", "inspect", box.spec.name], capture_output=True).returncode != 0
    assert "docker exec -it" in box.attach_hint() and box.spec.name in box.attach_hint()
