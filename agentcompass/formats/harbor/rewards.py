"""The Harbor verifier's run and its verdict: tests/test.sh over a fresh /tests with the reward files the agent
could have written cleared first, the rewards read back as Harbor 0.26 reads them (reward.json, else
reward.txt; finite numbers only), and a multi-step task's grade combined from its steps'."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentcompass.core.errors import (RewardFileEmptyError, RewardFileNotFoundError, VerifierError,
                                       VerifierOutputParseError, VerifierTimeoutError)
from agentcompass.core.results import read_if_present
from agentcompass.core.safe_files import download_checked
from agentcompass.core.task import AgentOutcome, Grade, Task
from agentcompass.formats.integrity import clear_verifier_inputs, tampering_note

if TYPE_CHECKING:
    from agentcompass.core.sandbox import Sandbox
    from agentcompass.core.context import TrialContext

VERIFIER_DIR = "/logs/verifier"
REWARD_FILES = (f"{VERIFIER_DIR}/reward.txt", f"{VERIFIER_DIR}/reward.json")
TESTS_DIR = "/tests"


def run_tests(task: Task, sandbox: "Sandbox", trial: "TrialContext", outcome: AgentOutcome) -> Grade:
    """tests/test.sh as the verifier user, over a fresh /tests and no reward file the agent could have left;
    the grade is its `reward` (without one, the mean of the named rewards)."""
    mode = task.data["environment_mode"]
    # A separate verifier's own image holds /tests itself, as in Harbor; the task's image (the fallback) and
    # a sandbox without an image built (a task run on the host) get them uploaded as in shared mode.
    bundled = mode == "separate" and task.data["verifier"]["bundled_tests"]
    upload = not bundled or not getattr(sandbox, "has_task_image", False)
    where = f"steps/{task.data['step']}/" if task.data.get("step") else ""
    # Nothing the agent left is read as a verdict: the reward files go and /tests is uploaded afresh.
    found = clear_verifier_inputs(sandbox, dirs=(TESTS_DIR,) if upload else (), files=REWARD_FILES,
                                  make=(VERIFIER_DIR, "/logs/agent"))
    trial.flag_tampering(tampering_note(found, (TESTS_DIR,) if where and upload else ()))  # not an earlier step's tests
    if upload:
        for tests in task.data["tests"]:  # a step's tests over the task's
            if os.path.isdir(tests):
                sandbox.upload(Path(tests), TESTS_DIR)
    clear = f"rm -rf {VERIFIER_DIR}/* && " if where else ""  # a step's grade is not the step before's
    result = sandbox.exec(
        f"{clear}bash {TESTS_DIR}/test.sh",
        env=task.data["verifier_env"], timeout=task.verify_timeout_s, user=task.data["verifier_user"],
    )
    output = result.stdout + result.stderr
    trial.log(f"{where}verifier.log", output)
    if result.timed_out:
        raise VerifierTimeoutError(f"verifier timed out after {task.verify_timeout_s:.0f}s")
    rewards = read_rewards(sandbox, trial.dir.joinpath(where, "verifier"), result.exit_code,
                           "see verifier.log" if output else "it printed nothing", trial)
    if where:  # the next step's check must not take this step's reward for the agent's
        sandbox.exec(f"rm -f -- {' '.join(REWARD_FILES)}", user="root", timeout=60)
    reward = rewards.get("reward", sum(rewards.values()) / len(rewards))
    details = {"test_exit_code": result.exit_code, "environment_mode": mode}
    if outcome.collected:
        details["collected"] = outcome.collected
    return Grade(passed=reward >= 1.0, reward=reward, rewards=rewards, details=details)


def read_rewards(sandbox: "Sandbox", local: Path, exit_code: int, hint: str = "see verifier.log",
                 trial: "TrialContext | None" = None) -> dict[str, float]:
    """The verifier's rewards, downloaded to `local`: reward.json's named ones, else reward.txt's one. A link in
    the verifier's folder is never followed; with the trial at hand it is recorded as tampering (the attempt fails)."""
    try:
        if trial is not None:
            download_checked(sandbox, VERIFIER_DIR, local, trial)
        else:
            sandbox.download(VERIFIER_DIR, local)
    except FileNotFoundError:
        pass
    try:
        return parse_rewards(local, exit_code, hint)
    except VerifierError as exc:
        exc.exit_code = exit_code  # a test.sh killed by a signal is told apart (core/leftovers.py)
        raise


def parse_rewards(local: Path, exit_code: int, hint: str) -> dict[str, float]:
    """reward.json's named rewards, else reward.txt's one; Harbor's error class for each way there is none."""
    try:  # reward.json first, as Harbor reads it (verifier.py)
        data = read_if_present(os.path.join(local, "reward.json"))
        if data is not None:
            if not data.strip():
                raise RewardFileEmptyError("unreadable reward file: reward.json is empty")
            named = json.loads(data)
            if not isinstance(named, dict) or not named:
                raise ValueError("reward.json must be a non-empty object of named rewards")
            return {str(k): finite(v) for k, v in named.items()}
        text = read_if_present(os.path.join(local, "reward.txt"))
        if text is not None:
            if not text.strip():
                raise RewardFileEmptyError("unreadable reward file: reward.txt is empty")
            return {"reward": finite(float(text.decode().strip()))}
    except ValueError as exc:
        raise VerifierOutputParseError(f"unreadable reward file: {exc}") from exc
    raise RewardFileNotFoundError(
        f"test.sh (exit {exit_code}) wrote neither {VERIFIER_DIR}/reward.txt nor reward.json; {hint}"
    )


def finite(value: Any) -> float:
    """A reward as Harbor accepts it: a real, finite number (not a string, NaN or infinity)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"reward {value!r} is not a finite number")
    return float(value)


def reaches(rewards: dict[str, float], minimum: float | dict[str, float] | None) -> bool:
    """A step's min_reward: one threshold for its reward, or one per named reward (absent counts 0)."""
    if minimum is None:
        return True
    if isinstance(minimum, dict):
        return all(rewards.get(key, 0.0) >= value for key, value in minimum.items())
    return rewards.get("reward", sum(rewards.values()) / max(len(rewards), 1)) >= minimum


def combine_steps(steps: list[dict[str, Any]], strategy: str, total: int) -> Grade:
    """The trial's reward from its graded steps': their mean, or the final step's. As Harbor 0.26 (Trial.
    _aggregate_step_rewards), a step never reached (after a stop below min_reward) is left out of the mean."""
    rewards = {f"{s['name']}/{key}": value for s in steps for key, value in s["rewards"].items()}
    if not steps:  # the agent failed before the first step was graded
        reward = 0.0
    elif strategy == "final":
        reward = steps[-1]["reward"]  # the last step run: a stop below min_reward ends the task there
    else:
        reward = sum(s["reward"] for s in steps) / len(steps)
    return Grade(passed=reward >= 1.0, reward=reward, rewards={"reward": reward, **rewards},
                 details={"steps": steps, "steps_run": len(steps), "steps_total": total})
