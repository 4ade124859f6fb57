"""A lost docker sandbox is the infrastructure's fault: containers removed or OOM-killed under a trial, and containers
killed at random never change a verdict."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agentcompass.core.errors import InfraError, SandboxLost
from harbor_factory import make_recipe, make_task
from docker_sandbox import containers, open_sandbox, plain_context, provider, unique  # noqa: F401 (fixtures)

pytestmark = pytest.mark.docker


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


MAX_KILLS = 16  # the test asserts at least 10: enough kills at every phase of a trial, and a run that can end


def kill_at_random(run_name: str, until_done: Path, stop_after: int, stop: threading.Event, kills: list[str]) -> None:
    """Every 0.5-1 s, SIGKILL one running container of this run (chosen by its run label), until
    `stop_after` trials are recorded or MAX_KILLS containers are dead: the last few then run alone, and a lone
    trial killed every second would never finish. The kill count is bounded too because the rate is fixed in
    seconds: on a loaded machine a trial takes longer than the gap between kills and would be killed again and
    again (a livelock of the test, not of the run)."""
    while not stop.wait(random.uniform(0.5, 1.0)):
        done = until_done.read_text().count("\n") if until_done.exists() else 0
        if done >= stop_after or len(kills) >= MAX_KILLS:
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
