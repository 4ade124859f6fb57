"""The Harbor verifier's run and its verdict: tests/test.sh over a fresh /tests with the reward files the agent
could have written cleared first, the rewards read back as Harbor 0.26 reads them (reward.json, else
reward.txt; finite numbers only), and a multi-step task's grade combined from its steps'."""

from __future__ import annotations

import base64
import json
import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentcompass.core.errors import (RewardFileEmptyError, RewardFileNotFoundError, VerifierError,
                                       VerifierOutputParseError, VerifierTimeoutError)
from agentcompass.core.results import read_if_present
from agentcompass.core.safe_files import download_checked
from agentcompass.core.task import AgentOutcome, Grade, Task
from agentcompass.formats.integrity import clear_verifier_inputs, tampering_note
from agentcompass.formats.verifier_guard import check_changes, echo_watchers, watchers

if TYPE_CHECKING:
    from agentcompass.core.sandbox import Sandbox
    from agentcompass.core.context import TrialContext

VERIFIER_DIR = "/logs/verifier"
REWARD_NAMES = ("reward.txt", "reward.json")
REWARD_FILES = tuple(f"{VERIFIER_DIR}/{name}" for name in REWARD_NAMES)
REWARD_BYTES = 1 << 20  # read back in the verifier's command; a larger one (never seen) is read as downloaded
TESTS_DIR = "/tests"
GUARDED = (VERIFIER_DIR, TESTS_DIR)  # no process but the verifier's holds or watches them while it runs


def run_tests(task: Task, sandbox: "Sandbox", trial: "TrialContext", outcome: AgentOutcome) -> Grade:
    """tests/test.sh as the verifier user, over a fresh /tests and no reward file the agent could have left;
    the grade is its `reward` (without one, the mean of the named rewards)."""
    mode = task.data["environment_mode"]
    # A separate verifier's own image holds /tests itself, as in Harbor; the task's image (the fallback) and
    # a sandbox without an image built (a task run on the host) get them uploaded as in shared mode.
    bundled = mode == "separate" and task.data["verifier"]["bundled_tests"]
    upload = not bundled or not getattr(sandbox, "has_task_image", False)
    where = f"steps/{task.data['step']}/" if task.data.get("step") else ""
    verifier_user = task.data["verifier_user"]
    # Where the agent worked, what it planted for the verifier to run fails the attempt (verifier_guard.py).
    changed = check_changes(sandbox, task.workdir, trial) if mode == "shared" else {}
    # Nothing the agent left is read as a verdict: the reward files go and /tests is uploaded afresh; both
    # folders then belong to the verifier's user alone while it runs.
    found = clear_verifier_inputs(sandbox, dirs=(TESTS_DIR,) if upload else (), files=REWARD_FILES,
                                  make=(VERIFIER_DIR, "/logs/agent"),
                                  keep={VERIFIER_DIR: verifier_user or "root", **({TESTS_DIR: "root"} if upload else {})})
    trial.flag_tampering(tampering_note(found, (TESTS_DIR,) if where and upload else ()))  # not an earlier step's tests
    if upload:
        for tests in task.data["tests"]:  # a step's tests over the task's
            if os.path.isdir(tests):
                sandbox.upload(Path(tests), TESTS_DIR)
    clear = f"rm -rf {VERIFIER_DIR}/* && " if where else ""  # a step's grade is not the step before's
    mark = uuid.uuid4().hex
    result = sandbox.exec(
        f"{clear}{echo_early_rewards(mark)}; {echo_watchers(mark, 'before', GUARDED)}; bash {TESTS_DIR}/test.sh; "
        f"code=$?; {echo_rewards(mark)}; {echo_watchers(mark, 'after', GUARDED)}; exit $code",
        env=task.data["verifier_env"], timeout=task.verify_timeout_s, user=verifier_user,
    )
    stdout, read_back = split_rewards(result.stdout, mark)
    stdout, early = split_early(stdout, mark)
    for name in early:  # cleared a moment before: only a process the agent left running could have written it
        trial.mark_tampered(f"{VERIFIER_DIR}/{name} was written again between its clearing and test.sh's start: a "
                            f"process outside the verifier writes the reward")
    for evidence in watchers(result.stdout, mark):
        trial.mark_tampered(evidence)
    output = stdout + result.stderr
    trial.log(f"{where}verifier.log", output)
    if result.timed_out:
        raise VerifierTimeoutError(f"verifier timed out after {task.verify_timeout_s:.0f}s")
    local = trial.dir.joinpath(where, "verifier")
    download_rewards(sandbox, local, trial)
    if read_back is not None:  # the rewards as test.sh left them, read in its own command: they are the verdict
        for name, text in rewritten(local, read_back).items():
            trial.mark_tampered(f"{VERIFIER_DIR}/{name} changed after test.sh ended ({text}): a process outside "
                                f"the verifier wrote it")
        keep_read_back(local, read_back)
    rewards = read_rewards(local, result.exit_code, "see verifier.log" if output else "it printed nothing")
    if where:  # the next step's check must not take this step's reward for the agent's
        sandbox.exec(f"rm -f -- {' '.join(REWARD_FILES)}", user="root", timeout=60)
    reward = rewards.get("reward", sum(rewards.values()) / len(rewards))
    details = {"test_exit_code": result.exit_code, "environment_mode": mode, **changed}
    if outcome.collected:
        details["collected"] = outcome.collected
    return Grade(passed=reward >= 1.0, reward=reward, rewards=rewards, details=details)


def echo_rewards(mark: str) -> str:
    """Shell that prints each reward file after a line `mark NAME` (base64, one line): read in the verifier's own
    command, so nothing that runs after it ends can be read as its verdict."""
    return "; ".join(f'if [ -f {VERIFIER_DIR}/{name} ]; then printf "\\n{mark} {name} "; '
                     f"head -c {REWARD_BYTES} {VERIFIER_DIR}/{name} | base64 | tr -d '\\n'; fi"
                     for name in REWARD_NAMES) + f'; printf "\\n{mark} end\\n"'


def echo_early_rewards(mark: str) -> str:
    """Shell that prints a line `mark early NAME` for each reward file already there before test.sh starts."""
    return "; ".join(f'{{ [ ! -e {VERIFIER_DIR}/{name} ] || echo "{mark} early {name}"; }}' for name in REWARD_NAMES)


def split_early(stdout: str, mark: str) -> tuple[str, list[str]]:
    """(the output without the lines printed before test.sh ran, the reward files the early ones name)."""
    names: list[str] = []
    while stdout.startswith(f"{mark} "):
        line, _, stdout = stdout.partition("\n")
        if line.startswith(f"{mark} early "):
            names.append(line[len(f"{mark} early "):])
    return stdout, [n for n in names if n in REWARD_NAMES]


def split_rewards(stdout: str, mark: str) -> tuple[str, dict[str, bytes] | None]:
    """(test.sh's own output, the reward files it left by name); None when they were not all read back (the
    output was cut at the exec's cap, or the image has no base64): the downloaded files are then the verdict."""
    head, sep, tail = stdout.partition(f"\n{mark} ")
    if not sep or f"\n{mark} end\n" not in f"\n{mark} {tail}":
        return stdout, None
    read: dict[str, bytes] = {}
    for line in f"{mark} {tail}".splitlines():
        _, _, rest = line.partition(f"{mark} ")
        name, _, data = rest.partition(" ")
        if name in REWARD_NAMES:
            try:
                read[name] = base64.b64decode(data, validate=True)
            except ValueError:
                return head, None
    return head, read


def download_rewards(sandbox: "Sandbox", local: Path, trial: "TrialContext | None" = None) -> None:
    """The verifier's folder, copied to `local`. A link in it is never followed; with the trial at hand it is
    recorded as tampering (the attempt fails)."""
    try:
        if trial is not None:
            download_checked(sandbox, VERIFIER_DIR, local, trial)
        else:
            sandbox.download(VERIFIER_DIR, local)
    except FileNotFoundError:
        pass


def rewritten(local: Path, read_back: dict[str, bytes]) -> dict[str, str]:
    """The reward files whose downloaded copy is not what test.sh left, with what changed."""
    changed = {}
    for name in REWARD_NAMES:
        path = local / name
        now = path.read_bytes() if path.is_file() else None
        before = read_back.get(name)
        if now != before and not (before is not None and len(before) >= REWARD_BYTES):
            changed[name] = "made" if before is None else "removed" if now is None else "rewritten"
    return changed


def keep_read_back(local: Path, read_back: dict[str, bytes]) -> None:
    """The attempt's copies of the reward files become what test.sh left."""
    for name in REWARD_NAMES:
        path = local / name
        if name in read_back and len(read_back[name]) < REWARD_BYTES:
            local.mkdir(parents=True, exist_ok=True)
            path.write_bytes(read_back[name])
        elif name not in read_back and path.is_file():
            path.unlink()


def read_rewards(local: Path, exit_code: int, hint: str = "see verifier.log") -> dict[str, float]:
    """The verifier's rewards from its files in `local`: reward.json's named ones, else reward.txt's one."""
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
