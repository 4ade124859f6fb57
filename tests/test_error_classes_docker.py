"""The count cannot be gamed (issue 36.4), on docker: what a failing agent leaves in its sandbox after its turn (a
replaced shell that no later command survives, a process that erases the reward behind the verifier) makes a failed
attempt in the rate's base, never an infra error (retried, paid again) nor an attempt without a valid reward (left
out of a Harbor mean). The honest control, a verifier that writes no reward with nothing of the agent's running,
keeps Harbor's verdict."""

from __future__ import annotations

import subprocess
import threading
import uuid

import pytest

from harbor_factory import make_task
from test_error_classes import run_dataset

pytestmark = pytest.mark.docker

ZERO = "echo 0 > /logs/verifier/reward.txt"  # impossible tasks: the tests never pass
# Every later `bash -c` in the sandbox exits 99: the runner's own next command (clearing the verifier's inputs) fails.
REPLACE_SHELL = ("printf '#!/bin/sh\\nexit 99\\n' > /usr/bin/bash.new && chmod 755 /usr/bin/bash.new "
                 "&& mv -f /usr/bin/bash.new /usr/bin/bash")
ERASER = ("nohup sh -c 'while :; do rm -f /logs/verifier/reward.txt /logs/verifier/reward.json; sleep 0.02; done' "
          ">/dev/null 2>&1 &")


def test_a_failing_agents_spoiled_sandbox_stays_a_failed_attempt_in_the_base(tmp_path, base_image):
    tasks = tmp_path / "tasks"
    dockerfile = f"FROM {base_image}\nWORKDIR /app\n"
    make_task(tasks, "replaces-the-shell", solve=REPLACE_SHELL, test=ZERO, dockerfile=dockerfile)
    make_task(tasks, "erases-the-reward", solve=ERASER, test=f"{ZERO}\nsleep 1", dockerfile=dockerfile)
    make_task(tasks, "honest-writes-no-reward", solve="true", test="exit 0", dockerfile=dockerfile)
    rows, summary, stdout = run_dataset(tmp_path, tasks, "oracle", "--max-retries", "1", env="docker")
    for task in ("replaces-the-shell", "erases-the-reward"):
        row = rows[task]
        assert (row["status"], row["error_category"], row["retries"]) == ("failed", None, 0), (task, row)
    # The replaced shell is caught by whichever check sees it first: the verifier's changed-files check (tampered,
    # naming it) or, where that did not run, the spoiled-sandbox probe. Either way: failed, in the base, not retried.
    shell = rows["replaces-the-shell"]
    assert any("/usr/bin/bash" in e for e in shell["details"].get("tampered", [])) or (
        shell["details"].get("error_class") == "AgentSpoiledSandboxError"
        and ("could not" in shell["message"] or "exit 99" in shell["message"])), shell
    assert rows["erases-the-reward"]["details"]["error_class"] == "AgentSpoiledSandboxError", rows["erases-the-reward"]
    assert "still ran beside the verifier" in rows["erases-the-reward"]["message"]
    assert "rm -f /logs/verifier/reward.txt" in rows["erases-the-reward"]["message"]
    honest = rows["honest-writes-no-reward"]
    assert (honest["status"], honest["details"]["error_class"]) == ("error", "RewardFileNotFoundError"), honest
    # Harbor's mean over the attempts with a valid reward: both spoiled attempts are in it, as failures.
    assert (summary["pass_at_1"], summary["pass_at_1_tasks"], summary["failed"], summary["incomplete"]) == (0.0, 2, 2, 1)


# Waits (up to 30 s) for the process limit the test puts on its container, then fills it with sleepers and fails: the
# classic fork bomb's effect (no process can start any more) without its CPU spin, bounded by the limit.
FORK_BOMB = ("for i in $(seq 300); do for f in /sys/fs/cgroup/pids.max /sys/fs/cgroup/pids/pids.max; do "
             "[ -r $f ] && [ \"$(cat $f)\" != max ] && break 2; done; sleep 0.1; done; "
             "[ \"$i\" = 300 ] && exit 0; exec /bin/sh -c 'while :; do sleep 600 & done' 2>/dev/null")


def limit_processes(name_part: str, stop: threading.Event) -> None:
    """Put a process limit of 48 on the trial's container as soon as it runs (what docker hardening gives every
    sandbox), so the agent's fork bomb clogs its own container and nothing else on this shared engine."""
    while not stop.wait(0.2):
        found = subprocess.run(["docker", "ps", "-q", "--filter", f"name={name_part}"], capture_output=True, text=True)
        for container in found.stdout.split():
            subprocess.run(["docker", "update", "--pids-limit", "48", container], capture_output=True)
            return


def test_a_fork_bomb_left_by_a_failing_agent_is_its_failed_attempt_not_an_infra_retry(tmp_path, base_image):
    task = f"fork-bomb-{uuid.uuid4().hex[:8]}"
    make_task(tmp_path / "tasks", task, solve=FORK_BOMB, test=ZERO, dockerfile=f"FROM {base_image}\nWORKDIR /app\n")
    stop = threading.Event()
    watcher = threading.Thread(target=limit_processes, args=(task, stop), daemon=True)
    watcher.start()
    try:
        rows, summary, _ = run_dataset(tmp_path, tmp_path / "tasks", "oracle", "--max-retries", "1", env="docker")
    finally:
        stop.set()
        watcher.join()
    row = rows[task]
    assert (row["status"], row["error_category"], row["retries"]) == ("failed", None, 0), row
    assert row["details"]["error_class"] == "AgentSpoiledSandboxError" and row["agent_exit_status"] != "completed", row
    assert (summary["pass_at_1"], summary["pass_at_1_tasks"], summary["failed"]) == (0.0, 1, 1)
