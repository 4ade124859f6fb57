"""Terminal-Bench in real containers: the fixture tasks, tmux sessions, users and workdirs, compose services."""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from pathlib import Path

import pytest

from terminal_bench_tasks import (CLIENT_DOCKERFILE, FETCH, SLOW_RUN_TESTS, TB1, TB2, TWO_SERVICES, python_repl_files,
                                  run_host, trials, verdict_script, write_task)


# -- real containers -----------------------------------------------------------------------
@pytest.mark.docker
def test_terminal_bench_on_docker_grades_both_fixture_tasks(cli, base_image: str, tmp_path: Path) -> None:
    run_name = f"tb-{uuid.uuid4().hex[:8]}"  # unique: container names derive from it, on a shared engine
    for harness, status in (("oracle", "passed"), ("nop", "failed")):
        done = cli("run", "terminal_bench", harness, "none", "--env", "docker",
                   "--benchmark-params", json.dumps({"path": str(TB1)}),
                   "--results-dir", str(tmp_path), "--run-name", run_name, timeout=900)
        assert done.returncode == 0, done.stderr
        rows = trials(tmp_path / run_name / f"terminal_bench__{harness}__none__docker")
        assert {k: r["status"] for k, r in rows.items()} == {"greeting-file": status, "count-lines": status}, rows
    # No tmux in this image: solution.yaml's commands ran as one script, so `cd /app` carried over.
    counted = rows["count-lines"]["details"].get("tests", rows["count-lines"])
    assert {name.split(" - ")[0] for name in counted} == {"test_count", "test_data_unchanged"}
    assert counted["test_data_unchanged"] == "passed"  # nop leaves the image's data intact


@pytest.mark.docker
def test_terminal_bench_2_on_docker(cli, base_image: str, tmp_path: Path) -> None:
    run_name = f"tb2-{uuid.uuid4().hex[:8]}"
    for harness, status in (("oracle", "passed"), ("nop", "failed")):
        done = cli("run", "terminal_bench_2", harness, "none", "--env", "docker",
                   "--benchmark-params", json.dumps({"path": str(TB2)}),
                   "--results-dir", str(tmp_path), "--run-name", run_name, timeout=900)
        assert done.returncode == 0, done.stderr
        row = trials(tmp_path / run_name / f"terminal_bench_2__{harness}__none__docker")["sum-numbers"]
        assert row["status"] == status, row


TMUX_IMAGE = """FROM {base}
RUN apt-get update && apt-get install -y --no-install-recommends tmux && rm -rf /var/lib/apt/lists/*
WORKDIR /app
"""


def run_docker(cli, tmp_path: Path, dataset: Path) -> dict:
    run_name = f"tb-{uuid.uuid4().hex[:8]}"  # unique: container names derive from it, on a shared engine
    done = cli("run", "terminal_bench", "oracle", "none", "--env", "docker", "--task-concurrency", "4",
               "--benchmark-params", json.dumps({"path": str(dataset)}), "--results-dir", str(tmp_path / "res"),
               "--run-name", run_name, timeout=900)
    assert done.returncode == 0, done.stderr
    return trials(next((tmp_path / "res" / run_name).iterdir()))


@pytest.mark.docker
def test_shells_are_tmux_sessions_where_the_image_has_tmux(cli, base_image: str, tmp_path: Path) -> None:
    dataset = tmp_path / "data"
    swebench = "instruction: x\nparser_name: swebench\n"
    image = TMUX_IMAGE.format(base=base_image)
    # run_tests_in_same_shell: the tests see what the agent exported in its shell; without it they do not.
    for name, same_shell in (("same-shell", "true"), ("fresh-shell", "false")):
        write_task(dataset, name, dockerfile=image, task_yaml=f"{swebench}run_tests_in_same_shell: {same_shell}\n",
                   files={"solution.yaml": "- export SECRET_WORD=xyzzy\n",
                          "run-tests.sh": verdict_script('[ "$SECRET_WORD" = xyzzy ]')})
    # Keystrokes typed into a Python REPL, as a terminal would take them.
    write_task(dataset, "python-repl", dockerfile=image, task_yaml=swebench, files=python_repl_files())
    rows = run_docker(cli, tmp_path, dataset)
    assert {k: r["status"] for k, r in rows.items()} == {"same-shell": "passed", "fresh-shell": "failed",
                                                         "python-repl": "passed"}, rows


@pytest.mark.docker
def test_tests_run_as_root_in_the_images_workdir_while_the_agent_runs_as_its_user(cli, base_image: str,
                                                                                   tmp_path: Path) -> None:
    dataset = tmp_path / "data"
    # No WORKDIR anywhere: the container's WorkingDir is `/`, as officially (not /app).
    write_task(dataset, "non-root", dockerfile=f"FROM {base_image}\nRUN useradd -m player\nUSER player\n",
               task_yaml="instruction: x\nparser_name: swebench\n",
               files={"solution.sh": "id -un > /tmp/agent-user; pwd > /tmp/agent-cwd\n",
                      "run-tests.sh": verdict_script('[ "$(cat /tmp/agent-user)" = player ] && [ "$(cat /tmp/agent-cwd)" = / ] '
                                                     '&& [ "$(id -u)" = 0 ] && [ "$PWD" = / ] && apt-get --version >/dev/null '
                                                     '&& touch /root/tests-were-root')})
    row = run_docker(cli, tmp_path, dataset)["non-root"]
    assert row["status"] == "passed", row


def test_the_default_recipe_is_the_leaderboards_dataset_and_head_is_offered(cli) -> None:
    shown = {name: cli("config", "show", name, "oracle", "none") for name in ("terminal_bench", "terminal_bench_head")}
    assert all(done.returncode == 0 for done in shown.values()), {k: v.stderr for k, v in shown.items()}
    # terminal-bench-core 0.1.1: tasks/ of laude-institute/terminal-bench at the commit the registry names.
    assert re.search(r"ref: 91e10457b5410f16c44364da1a34cb6de8c488a5\s+subdir: tasks", shown["terminal_bench"].stdout)
    assert re.search(r"ref: main\s+subdir: original-tasks", shown["terminal_bench_head"].stdout)


@pytest.mark.docker
def test_a_two_service_compose_task_runs_all_its_services_on_the_trials_network(cli, base_image: str,
                                                                                 tmp_path: Path) -> None:
    dataset = tmp_path / "data"
    write_task(dataset, "web-client", dockerfile=CLIENT_DOCKERFILE.format(base=base_image),
               compose=TWO_SERVICES.format(base=base_image), task_yaml="instruction: x\nparser_name: swebench\n",
               files={"solution.sh": f"{FETCH} > /app/fetched.txt\n",
                      "run-tests.sh": verdict_script(
                          '[ "$(cat /app/fetched.txt)" = 42 ] '  # the server answered the agent
                          f'&& [ "$({FETCH})" = 42 ] '  # and answers the tests
                          '&& [ -f /tmp/command-ran ] '  # the client's compose command ran, not a keep-alive
                          '&& [ "$(cat /greeting)" = "from build args" ] '
                          '&& [ -d /logs ] && [ -d /agent-logs ] '
                          '&& ! dd if=/dev/zero of=/scratch/big bs=1M count=2 2>/dev/null '  # tmpfs size=1m
                          '&& [ "$(cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes)" = 268435456 ]')})
    row = run_docker(cli, tmp_path, dataset)["web-client"]
    assert row["status"] == "passed", row
    run_name = next((tmp_path / "res").iterdir()).name
    leftovers = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=run={run_name}"], capture_output=True, text=True)
    networks = subprocess.run(["docker", "network", "ls", "-q", "--filter", f"label=run={run_name}"], capture_output=True,
                              text=True)
    volumes = subprocess.run(["docker", "volume", "ls", "-q", "--filter", f"label=run={run_name}"], capture_output=True,
                             text=True)
    assert (leftovers.stdout, networks.stdout, volumes.stdout) == ("", "", ""), "a service, network or volume was left"


@pytest.mark.docker
def test_compose_container_details_reach_the_engine(base_image: str, tmp_path: Path) -> None:
    from agentcompass.providers.docker.provider import DockerProvider
    from agentcompass.core.sandbox import ComposeSpec, ContainerSpec, SandboxSpec

    name = f"ac-test-compose-{uuid.uuid4().hex[:8]}"
    client = ContainerSpec(name="client", image=base_image, command=["sleep", "infinity"], user="nobody",
                           tmpfs={"/scratch": "size=2m"}, cap_add=["NET_ADMIN"], privileged=False)
    # (privileged is passed the same way; this machine's engine cannot start privileged containers)
    server = ContainerSpec(name="db", image=base_image, command=["sleep", "infinity"], cpus=0.5, memory_mb=128)
    box = DockerProvider().open(SandboxSpec(name=name, image=base_image, workdir="/", labels={"agentcompass": "1"},
                                            compose=ComposeSpec(client=client, services=[server])))
    try:
        assert box.exec("id -un").stdout.strip() == "nobody"
        assert box.exec("getent hosts db").exit_code == 0  # the service answers to its name
        details = json.loads(subprocess.run(["docker", "inspect", name, f"{name}-db"], capture_output=True, text=True,
                                            check=True).stdout)
        mine, theirs = details
        assert mine["HostConfig"]["Tmpfs"] == {"/scratch": "size=2m"} and mine["HostConfig"]["CapAdd"] == ["NET_ADMIN"]
        assert mine["Config"]["Cmd"] == ["sleep", "infinity"]
        assert theirs["HostConfig"]["Memory"] == 128 * 2**20
        assert theirs["HostConfig"]["NanoCpus"] == 500_000_000
    finally:
        box.close()
    gone = subprocess.run(["docker", "inspect", f"{name}-db"], capture_output=True)
    assert gone.returncode != 0
    assert subprocess.run(["docker", "network", "inspect", name], capture_output=True).returncode != 0


def test_a_test_timeout_after_an_agent_timeout_is_parsed_as_officially(cli, tmp_path: Path) -> None:
    """terminal-bench's harness: once the agent failed (here: timed out), a test timeout does not end the
    trial; the pane is parsed as it is. After an agent that finished, a test timeout is unresolved."""
    dataset = tmp_path / "data"
    write_task(dataset, "slow-tests", dockerfile="FROM x\nWORKDIR /app\n",
               task_yaml="instruction: wait\nmax_agent_timeout_sec: 2\nmax_test_timeout_sec: 4\n",
               files={"solution.sh": "sleep 30\n", "run-tests.sh": SLOW_RUN_TESTS})
    after_agent_timeout = run_host(cli, tmp_path, dataset, "oracle")["slow-tests"]
    assert after_agent_timeout["agent_exit_status"] == "timeout", after_agent_timeout
    assert after_agent_timeout["status"] == "passed", after_agent_timeout
    after_nop = run_host(cli, tmp_path, dataset, "nop")["slow-tests"]
    assert after_nop["status"] == "failed" and after_nop["details"]["failure_mode"] == "test_timeout", after_nop


def test_without_tmux_the_tests_output_is_cut_to_what_the_pane_holds() -> None:
    from agentcompass.formats.terminal_bench.format import KEPT_ROWS, last_rows

    lines = [f"line {n}" for n in range(5000)]
    assert last_rows("\n".join(lines) + "\n").splitlines() == lines[-KEPT_ROWS:]
    wide = ["x" * 161] * 1100  # two rows each
    assert len(last_rows("\n".join(wide) + "\n").splitlines()) == KEPT_ROWS // 2
