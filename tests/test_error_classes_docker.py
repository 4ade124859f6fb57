"""The count cannot be gamed (issue 36.4), on docker: what a failing agent leaves in its sandbox after its turn (a
replaced shell that no later command survives, a process that erases the reward behind the verifier) makes a failed
attempt in the rate's base, never an infra error (retried, paid again) nor an attempt without a valid reward (left
out of a Harbor mean). The honest control, a verifier that writes no reward with nothing of the agent's running,
keeps Harbor's verdict."""

from __future__ import annotations

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
        assert row["details"]["error_class"] == "AgentSpoiledSandboxError", row
    assert "could not" in rows["replaces-the-shell"]["message"] or "exit 99" in rows["replaces-the-shell"]["message"]
    assert "still ran beside the verifier" in rows["erases-the-reward"]["message"]
    assert "rm -f /logs/verifier/reward.txt" in rows["erases-the-reward"]["message"]
    honest = rows["honest-writes-no-reward"]
    assert (honest["status"], honest["details"]["error_class"]) == ("error", "RewardFileNotFoundError"), honest
    # Harbor's mean over the attempts with a valid reward: both spoiled attempts are in it, as failures.
    assert (summary["pass_at_1"], summary["pass_at_1_tasks"], summary["failed"], summary["incomplete"]) == (0.0, 2, 2, 1)
