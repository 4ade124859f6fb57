"""The docker provider on a real engine: images, limits, network, timeouts, files, cleanup, interrupts.

Longer than 400 lines because its cases share one engine's fixtures (the calc image, a build context); split with them next.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from agentcompass.core.errors import InfraError, SandboxLost
from agentcompass.core.sandbox import TRUNCATION_MARK, SandboxSpec
from harbor_factory import make_recipe, make_task

pytestmark = pytest.mark.docker
REPO = Path(__file__).resolve().parent.parent


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def containers(label: str) -> list[str]:
    out = subprocess.run(["docker", "ps", "-aq", "--filter", f"label={label}"], capture_output=True, text=True, check=True)
    return out.stdout.split()


def inspect(name: str) -> dict:
    out = subprocess.run(["docker", "inspect", name], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)[0]


def write_task(root: Path, task_id: str, dockerfile: str, solve: str = "true",
               test: str = "echo 1 > /logs/verifier/reward.txt") -> None:
    """A Harbor task dir with its own Dockerfile."""
    task = root / task_id
    for sub in ("environment", "solution", "tests"):
        (task / sub).mkdir(parents=True)
    (task / "task.toml").write_text('version = "1.0"\n[environment]\nworkdir = "/app"\n')
    (task / "instruction.md").write_text("Do it.\n")
    (task / "environment" / "Dockerfile").write_text(dockerfile)
    (task / "solution" / "solve.sh").write_text(solve + "\n")
    (task / "tests" / "test.sh").write_text("mkdir -p /logs/verifier\n" + test + "\n")


def write_recipe(config_dir: Path, name: str, dataset: Path) -> None:
    (config_dir / "recipes").mkdir(parents=True, exist_ok=True)
    (config_dir / "recipes" / f"{name}.yaml").write_text(
        f"name: {name}\ndescription: test tasks\nformat: harbor\nsource: {{path: {dataset}}}\n")


@pytest.fixture(scope="module")
def provider(base_image):
    from agentcompass.providers.docker.provider import DockerProvider

    return DockerProvider()


@pytest.fixture(scope="module")
def plain_context(tmp_path_factory, base_image) -> Path:
    """A build context FROM the base image, shared by the sandbox tests (built once, cached by hash)."""
    context = tmp_path_factory.mktemp("plain") / "environment"
    context.mkdir()
    (context / "Dockerfile").write_text(f"FROM {base_image}\nWORKDIR /app\n")
    return context


@pytest.fixture
def open_sandbox(provider, plain_context, tmp_path):
    """Opens sandboxes from specs (defaults: the plain image) and closes them all afterwards."""
    opened = []

    def opener(target=None, **fields):
        fields.setdefault("build_context", plain_context)
        spec = SandboxSpec(name=unique("ac-test"), labels={"agentcompass": "1", "run": "pytest-docker"},
                           log_dir=tmp_path, **fields)
        box = (target or provider).open(spec)
        opened.append(box)
        return box

    yield opener
    for box in opened:
        box.close()


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
    assert info["Config"]["Labels"]["run"] == "pytest-docker"
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


def test_keep_alive_ignores_the_image_entrypoint(base_image, open_sandbox, tmp_path):
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


# -- images -------------------------------------------------------------------------------------------
def test_task_image_is_built_once_per_content(base_image, provider, tmp_path):
    from agentcompass.providers.docker.provider import DockerProvider

    context = tmp_path / "task-x" / "environment"
    context.mkdir(parents=True)
    (context / "Dockerfile").write_text(f"FROM {base_image}\nRUN echo {uuid.uuid4().hex} > /stamp\n")
    logs = [tmp_path / f"trial{i}" for i in range(3)]
    boxes = []
    fresh = DockerProvider()

    def open_one(log_dir: Path) -> None:
        spec = SandboxSpec(name=unique("ac-test"), build_context=context, labels={"agentcompass": "1"}, log_dir=log_dir)
        boxes.append(fresh.open(spec))

    for log_dir in logs:
        log_dir.mkdir()
    threads = [threading.Thread(target=open_one, args=(d,)) for d in logs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert len(boxes) == 3
        stamps = {box.exec("cat /stamp").stdout for box in boxes}
        assert len(stamps) == 1
        built = [d for d in logs if (d / "build.log").read_text().startswith("building")]
        assert len(built) == 1
        # A new provider (a later run) reuses the tag: nothing is built.
        again = DockerProvider().open(SandboxSpec(name=unique("ac-test"), build_context=context, log_dir=tmp_path))
        boxes.append(again)
        assert "cached" in (tmp_path / "build.log").read_text()
        assert again.exec("cat /stamp").stdout in stamps
    finally:
        for box in boxes:
            box.close()


def test_a_rebuilt_base_image_rebuilds_the_task_image(base_image, tmp_path):
    """The cache key includes the FROM image's id: a task never runs on a stale base."""
    import io

    import docker

    from agentcompass.providers.docker.provider import DockerProvider

    client = docker.from_env()
    base_tag = f"agentcompass-test/base-{uuid.uuid4().hex[:8]}:latest"
    context = tmp_path / "task-rebase" / "environment"
    context.mkdir(parents=True)
    (context / "Dockerfile").write_text(f"FROM {base_tag}\nRUN cp /basever /seen\n")

    def make_base(version: str) -> None:
        dockerfile = f"FROM {base_image}\nRUN echo {version} > /basever\n".encode()
        client.images.build(fileobj=io.BytesIO(dockerfile), tag=base_tag, rm=True)

    def seen(log_dir: Path) -> str:
        log_dir.mkdir()
        box = DockerProvider().open(SandboxSpec(name=unique("ac-test"), build_context=context, log_dir=log_dir))
        try:
            return box.exec("cat /seen").stdout.strip()
        finally:
            box.close()

    try:
        make_base("v1")
        assert seen(tmp_path / "a") == "v1"
        make_base("v2")
        assert seen(tmp_path / "b") == "v2"
        assert (tmp_path / "b" / "build.log").read_text().startswith("building")
    finally:
        client.images.remove(base_tag, force=True)


def test_from_images_skips_scratch_and_own_stages():
    from agentcompass.providers.docker.images import from_images

    dockerfile = "FROM --platform=linux/amd64 python:3.12 AS build\nRUN x\nFROM build\nFROM scratch\nfrom debian:12\n"
    assert from_images(dockerfile) == ["python:3.12", "debian:12"]


def test_base_images_fill_in_build_args():
    from agentcompass.providers.docker.images import base_images

    dockerfile = "ARG BASE_IMAGE=python:3.11-slim\nARG TAG\nFROM ${BASE_IMAGE}\nFROM debian:$TAG AS x\n"
    assert base_images(dockerfile, {}) == ["python:3.11-slim", "debian:"]
    assert base_images(dockerfile, {"BASE_IMAGE": "agentcompass/base:bookworm", "TAG": "12"}) == [
        "agentcompass/base:bookworm", "debian:12"]


def test_a_base_neither_local_nor_in_a_registry_stops_before_the_run(cli, base_image, tmp_path):
    """The demo builds FROM the recipe's base; one that cannot be had is one line, nothing written."""
    base = "127.0.0.1:1/agentcompass/no-such-base:x"  # a registry that refuses at once, on this machine
    run = cli("run", "demo", "oracle", "none", "--env", "docker", "--results-dir", str(tmp_path / "out"),
              env={"AGENTCOMPASS_BASE_IMAGE": base})
    assert run.returncode == 2, run.stderr
    [line] = run.stderr.strip().splitlines()
    assert base in line and "build-base-image.sh" in line and "AGENTCOMPASS_BASE_IMAGE" in line
    assert not (tmp_path / "out").exists()


def test_a_failed_build_is_recorded_once_and_never_retried(cli, base_image, tmp_path):
    dataset, config_dir = tmp_path / "data", tmp_path / "conf"
    write_task(dataset, "broken-env", f"FROM {base_image}\nRUN echo building-broken && exit 3\n")
    write_recipe(config_dir, "brokenbench", dataset)
    run = cli("run", "brokenbench", "oracle", "none", "--env", "docker", "--config-dir", str(config_dir),
              "--results-dir", str(tmp_path / "out"), "--run-name", "b", "--k", "3", "--task-concurrency", "1",
              "run.retry_backoff_s=0.1")
    assert run.returncode == 0, run.stderr
    run_dir = tmp_path / "out" / "b" / "brokenbench__oracle__none__docker"
    trials = sorted((json.loads(line) for line in (run_dir / "trials.jsonl").read_text().splitlines()),
                    key=lambda t: t["attempt"])
    assert [(t["status"], t["error_category"], t["retries"]) for t in trials] == [("error", "infra", 0)] * 3
    assert "not built again" not in trials[0]["message"]
    assert all("not built again" in t["message"] for t in trials[1:])
    built = [p for p in run_dir.rglob("build.log") if "building-broken" in p.read_text()]
    assert len(built) == 1


def test_failing_dockerfile_is_an_infra_error_naming_the_task(cli, base_image, tmp_path):
    dataset, config_dir = tmp_path / "data", tmp_path / "conf"
    write_task(dataset, "broken-env", f"FROM {base_image}\nRUN echo building-broken && exit 3\n")
    write_recipe(config_dir, "brokenbench", dataset)
    run = cli("run", "brokenbench", "oracle", "none", "--env", "docker", "--config-dir", str(config_dir),
              "--results-dir", str(tmp_path / "out"), "--run-name", "b", "--max-retries", "0")
    assert run.returncode == 0, run.stderr
    run_dir = tmp_path / "out" / "b" / "brokenbench__oracle__none__docker"
    (trial,) = [json.loads(line) for line in (run_dir / "trials.jsonl").read_text().splitlines()]
    assert (trial["status"], trial["error_category"]) == ("error", "infra")
    assert "broken-env" in trial["message"] and "build" in trial["message"]
    assert "building-broken" in (run_dir / "tasks" / "broken-env" / "attempt-1" / "build.log").read_text()


def test_missing_image_is_one_line_naming_image_and_override(cli, base_image, tmp_path):
    image = f"agentcompass/no-such-image:{uuid.uuid4().hex[:8]}"
    run = cli("run", "demo", "oracle", "none", "--env", "docker", "--env-params", json.dumps({"image": image}),
              "--results-dir", str(tmp_path))
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1
    assert image in lines[0] and "--env-params" in lines[0]
    assert list(tmp_path.iterdir()) == []


def test_no_engine_is_one_line_naming_docker_host(cli, tmp_path):
    run = cli("run", "demo", "oracle", "none", "--env", "docker", "--results-dir", str(tmp_path),
              env={"DOCKER_HOST": f"unix://{tmp_path}/nothing.sock"})
    assert run.returncode == 2
    assert len(run.stderr.strip().splitlines()) == 1
    assert "DOCKER_HOST" in run.stderr and "nothing.sock" in run.stderr
    # What a pip user can do: start the engine (no script of this repository's checkout).
    assert "systemctl start docker" in run.stderr and "dockerd" in run.stderr and "scripts/" not in run.stderr


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


# -- a lost sandbox is the infrastructure's fault ------------------------------------------------------
@pytest.mark.parametrize("action", [["kill"], ["rm", "-f"], ["stop", "-t", "1"]], ids=["kill", "rm", "stop"])
def test_a_container_lost_mid_command_raises_sandbox_lost(open_sandbox, action):
    box = open_sandbox()
    threading.Timer(1.0, subprocess.run, args=(["docker", *action, box.spec.name],), kwargs={"capture_output": True}).start()
    started = time.monotonic()
    with pytest.raises(SandboxLost, match=box.spec.name) as lost:
        box.exec("sleep 300")
    assert time.monotonic() - started < 120  # as the container went, not when the command would have ended
    assert isinstance(lost.value, InfraError) and lost.value.retryable
    with pytest.raises(SandboxLost):
        box.exec("true")


def test_files_of_a_removed_container_are_sandbox_lost_not_missing(open_sandbox, tmp_path):
    box = open_sandbox()
    subprocess.run(["docker", "rm", "-f", box.spec.name], check=True, capture_output=True)
    (tmp_path / "f.txt").write_text("x")
    with pytest.raises(SandboxLost, match="removed"):
        box.upload(tmp_path / "f.txt", "/app/f.txt")
    with pytest.raises(SandboxLost, match="removed"):  # not FileNotFoundError: that would read as "no reward file"
        box.download("/logs/verifier", tmp_path / "verifier")


def test_a_command_killed_for_memory_in_a_running_container_stays_the_agents(open_sandbox):
    box = open_sandbox(memory_mb=64)
    result = box.exec("python3 -c 'x = bytearray(400 * 1024 * 1024)'")
    assert result.exit_code == 137  # the agent's command died; the container did not
    assert box.exec("echo alive").stdout == "alive\n"
    assert box.details()["oom_kills"] >= 1
    assert open_sandbox().details() == {"oom_killed": False, "oom_kills": 0}


def test_an_oom_killed_agent_command_is_recorded_in_the_trial_details(cli, base_image, tmp_path):
    dataset, config_dir = tmp_path / "data", tmp_path / "conf"
    task = make_task(dataset, "hog", solve="python3 -c 'x = bytearray(400 * 1024 * 1024)'; echo done > /app/answer.txt",
                     test="grep -q done /app/answer.txt && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt",
                     dockerfile=f"FROM {base_image}\nWORKDIR /app\n")
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace("[environment]\n", "[environment]\nmemory_mb = 64\n"))
    make_recipe(config_dir, "hogbench", dataset, runs_on_host=False)
    run_name = unique("hog")
    run = cli("run", "hogbench", "oracle", "none", "--env", "docker", "--config-dir", str(config_dir),
              "--results-dir", str(tmp_path / "out"), "--run-name", run_name)
    assert run.returncode == 0, run.stderr
    (trial,) = [json.loads(line) for line in (tmp_path / "out" / run_name).glob("*/trials.jsonl").__next__().read_text().splitlines()]
    assert (trial["status"], trial["retries"]) == ("passed", 0)
    assert trial["details"]["oom_kills"] >= 1


def kill_at_random(run_name: str, until_done: Path, stop_after: int, stop: threading.Event, kills: list[str]) -> None:
    """Every 0.5-1 s, SIGKILL one running container of this run (chosen by its run label), until
    `stop_after` trials are recorded: the last few then run alone, and a lone trial killed every
    second would never finish."""
    while not stop.wait(random.uniform(0.5, 1.0)):
        done = until_done.read_text().count("\n") if until_done.exists() else 0
        if done >= stop_after:
            return
        running = subprocess.run(["docker", "ps", "-q", "--filter", f"label=run={run_name}", "--filter", "status=running"],
                                 capture_output=True, text=True).stdout.split()
        if running:
            victim = random.choice(running)
            if subprocess.run(["docker", "kill", victim], capture_output=True).returncode == 0:
                kills.append(victim)


def test_killing_containers_at_random_never_changes_a_verdict(base_image, tmp_path):
    """Issue 8.3: containers SIGKILLed at random during a run become retried infra errors, never a
    verifier's or an agent's verdict; every trial passes in the end and no container is left."""
    dataset, config_dir = tmp_path / "data", tmp_path / "conf"
    tasks = [f"fault-{i:02d}" for i in range(40)]
    for task_id in tasks:
        make_task(dataset, task_id, solve=f"sleep 1.5; echo {task_id} > /app/answer.txt",
                  test=f'[ "$(cat /app/answer.txt)" = {task_id} ] && echo 1 > /logs/verifier/reward.txt',
                  dockerfile=f"FROM {base_image}\nWORKDIR /app\n")
    make_recipe(config_dir, "faultbench", dataset, runs_on_host=False)
    run_name = unique("faults")
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentcompass", "run", "faultbench", "oracle", "none", "--env", "docker",
         "--config-dir", str(config_dir), "--results-dir", str(tmp_path / "out"), "--run-name", run_name,
         "--task-concurrency", "4", "--max-retries", "30", "run.retry_backoff_s=0.05"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stop, kills = threading.Event(), []
    trials_file = tmp_path / "out" / run_name / "faultbench__oracle__none__docker" / "trials.jsonl"
    killer = threading.Thread(target=kill_at_random, args=(run_name, trials_file, len(tasks) - 6, stop, kills))
    killer.start()
    try:
        _, stderr = proc.communicate(timeout=600)
    finally:
        stop.set()
        killer.join()
        proc.kill()
    assert proc.returncode == 0, stderr
    trials = [json.loads(line) for line in trials_file.read_text().splitlines()]
    retries = sum(t["retries"] for t in trials)
    print(f"\nfault injection: {len(trials)} trials, {len(kills)} containers killed, {retries} retries")
    assert sorted(t["task_id"] for t in trials) == tasks
    assert {t["status"] for t in trials} == {"passed"}, [t["message"] for t in trials if t["status"] != "passed"]
    assert len(kills) >= 10 and retries > 0
    assert containers(f"run={run_name}") == []
