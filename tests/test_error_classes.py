"""The one table of error classes (core/errors.py) as runs show it: Harbor's failure paths give Harbor 0.26's
verdicts and mean; an installed CLI that finished its work and then hung past its limit, or exited non-zero, is
graded and passes (Harbor's AgentTimeoutError and NonZeroAgentExitCodeError: graded, the reward counts); each
harness maps what it saw onto the classes; the run's timeout multipliers reach the effective limits."""

from __future__ import annotations

import json
import shutil
import tarfile
import uuid
from pathlib import Path

import pytest

from conftest import REPO, run_cli
from harbor_factory import make_recipe, make_task

ANSWER = "echo solved > /app/answer.txt"
CHECKS_ANSWER = 'if [ "$(cat /app/answer.txt 2>/dev/null)" = solved ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt'


def failure_path_tasks(root: Path) -> dict[str, tuple[str, float | None, str | None]]:
    """Harbor tasks whose oracle or verifier fails in each way Harbor's table names; per task the verdict Harbor 0.26
    gives (status here, reward, Harbor's exception class or None)."""
    # 8 s: time enough for a busy engine to start the solution (it writes its answer at once), not for its sleep
    make_task(root, "hangs-after-solving", solve=f"{ANSWER}\nsleep 60", test=CHECKS_ANSWER, agent_timeout=8)
    make_task(root, "exits-3-after-solving", solve=f"{ANSWER}\nexit 3", test=CHECKS_ANSWER)
    make_task(root, "hangs-unsolved", solve="sleep 60", test=CHECKS_ANSWER, agent_timeout=8)
    make_task(root, "verifier-hangs", solve=ANSWER, test="sleep 60", verify_timeout=2)
    make_task(root, "writes-no-reward", solve=ANSWER, test="exit 0")
    make_task(root, "empty-reward", solve=ANSWER, test=": > /logs/verifier/reward.txt")
    make_task(root, "garbage-reward", solve=ANSWER, test="echo lots > /logs/verifier/reward.txt")
    return {
        "hangs-after-solving": ("passed", 1.0, None),  # AgentTimeoutError: graded, counts
        "exits-3-after-solving": ("passed", 1.0, None),  # Harbor's oracle records the exit code and goes on
        "hangs-unsolved": ("failed", 0.0, None),
        "verifier-hangs": ("error", None, "VerifierTimeoutError"),
        "writes-no-reward": ("error", None, "RewardFileNotFoundError"),
        "empty-reward": ("error", None, "RewardFileEmptyError"),
        "garbage-reward": ("error", None, "VerifierOutputParseError"),
    }


def run_dataset(tmp_path: Path, dataset: Path, harness: str, *args: str, env: str = "local") -> tuple[dict, dict, str]:
    conf = tmp_path / "conf"
    make_recipe(conf, "failure_paths", dataset, runs_on_host=env == "local", extra="scoring: valid_reward\n")
    run_name = f"ec-{uuid.uuid4().hex[:8]}"
    done = run_cli("run", "failure_paths", harness, "none", "--env", env, "--config-dir", str(conf), "--results-dir",
                   str(tmp_path / "res"), "--run-name", run_name, *args, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    [run_dir] = (tmp_path / "res" / run_name).glob("*__*")
    rows = {r["task_id"]: r for r in map(json.loads, (run_dir / "trials.jsonl").read_text().splitlines())}
    return rows, json.loads((run_dir / "summary.json").read_text()), done.stdout


def test_the_oracles_failure_paths_give_harbors_verdicts_and_mean(tmp_path):
    expected = failure_path_tasks(tmp_path / "tasks")
    rows, summary, stdout = run_dataset(tmp_path, tmp_path / "tasks", "oracle", "--task-concurrency", "7")
    for task, (status, reward, harbor_class) in expected.items():
        row = rows[task]
        assert row["status"] == status, (task, row)
        if reward is not None:
            assert row["reward"] == reward, (task, row)
        if harbor_class is not None:
            assert (row["error_category"], row["details"]["error_class"]) == ("verifier", harbor_class), (task, row)
        assert row["retries"] == 0, row
    # Harbor's mean is over the trials with a valid reward: 2 of 3 here; the other four have no verdict.
    assert (summary["pass_at_1"], summary["pass_at_1_tasks"], summary["incomplete"]) == (round(2 / 3, 6), 3, 4)
    assert "pass@1 0.667 over 3 of 7 tasks · 4 attempts incomplete (verifier)" in stdout


# -- an installed CLI that finished its work, then hung or crashed ----------------------------------------------
FIX = "sed -i 's/return (data\\[mid\\] + data\\[mid + 1\\]) \\/ 2/return (data[mid - 1] + data[mid]) \\/ 2/' stats.py"


def stand_in_claude(cache: Path, after_fix: str) -> Path:
    """A claude_code bundle whose `claude` is a script: it fixes the demo's bug as a competent agent would, says so
    in the CLI's JSON, then does `after_fix` (hang, crash). Installed and run exactly as the real CLI is."""
    root = cache / "@anthropic-ai+claude-code@2.1.332"
    root.mkdir(parents=True)
    script = root / "claude"
    script.write_text("#!/bin/sh\n[ \"$1\" = --version ] && { echo 2.1.332; exit 0; }\n"
                      f"{FIX}\n"  # in the CLI's working directory, the task's workdir
                      'echo \'{"type":"result","subtype":"success","result":"Fixed."}\'\n'
                      f"{after_fix}\n")
    script.chmod(0o755)
    with tarfile.open(root / "agent.tar.gz", "w:gz") as tar:
        tar.add(script, arcname="bin/claude")
    return cache


def demo_task_config(tmp_path: Path) -> Path:
    conf = tmp_path / "conf"
    task = conf / "recipes" / "demo_one" / "fix-median-bug"
    shutil.copytree(REPO / "recipes" / "demo" / "fix-median-bug", task)
    (conf / "recipes" / "demo_one.yaml").write_text(
        "name: demo_one\ndescription: the demo's fix-median-bug\nformat: harbor\nsource: {path: demo_one}\n"
        "runs_on_host: true\nscoring: valid_reward\n")
    return conf


@pytest.mark.parametrize(("after_fix", "error_class", "says"), [
    ("sleep 600", "AgentTimeoutError", "ran past the agent time limit of 4 s"),
    ("exit 3", "NonZeroAgentExitCodeError", "exited with code 3"),
], ids=["hangs-after-its-work", "exits-3-after-its-work"])
def test_an_installed_cli_that_did_its_work_then_hung_or_crashed_is_graded_and_passes(tmp_path, after_fix, error_class,
                                                                                   says):
    cache = stand_in_claude(tmp_path / "cli-cache", after_fix)
    run_name = f"ec-{uuid.uuid4().hex[:8]}"
    done = run_cli("run", "demo_one", "claude_code", "claude-sonnet-4-5", "--env", "local", "--env-params",
                   '{"isolation": "none"}', "--config-dir",
                   str(demo_task_config(tmp_path)), "--no-model-check", "--model-base-url", "http://127.0.0.1:9",
                   f"harness.cache_dir={cache}", "harness.timeout_s=4", "--results-dir", str(tmp_path / "res"),
                   "--run-name", run_name, "--max-retries", "1", cwd=tmp_path, timeout=300,
                   env={"ANTHROPIC_API_KEY": "sk-stand-in", "HOME": str(tmp_path),
                        "AGENTCOMPASS_CACHE_DIR": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr[-3000:]
    [run_dir] = (tmp_path / "res" / run_name).glob("*__*")
    [row] = map(json.loads, (run_dir / "trials.jsonl").read_text().splitlines())
    assert (row["status"], row["reward"], row["error_category"]) == ("passed", 1.0, None), row
    assert row["details"]["error_class"] == error_class and says in row["message"], row
    assert row["retries"] == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["pass_at_1"], summary["pass_at_1_tasks"], summary["complete"]) == (1.0, 1, True)


# -- each harness maps what it saw onto the classes ---------------------------------------------------------------
@pytest.mark.parametrize(("code", "timed_out", "output", "error_class"), [
    (0, False, "", None),
    (1, True, "", "AgentTimeoutError"),
    (2, False, "", "NonZeroAgentExitCodeError"),
    (1, False, '{"api_error_status": 401}', "AgentAuthenticationError"),
    (1, False, '{"api_error_status": 404}', "ModelNotFoundError"),
    (1, False, '{"api_error_status": 400}', "BadRequestError"),
    (1, False, '{"api_error_status": 429}', "ApiRateLimitError"),
    (1, False, '{"api_error_status": 503}', "ApiInternalServerError"),
])
def test_an_installed_clis_ending_is_its_class(code, timed_out, output, error_class):
    from agentcompass.harnesses.claude_code import ClaudeCodeHarness

    harness = ClaudeCodeHarness.__new__(ClaudeCodeHarness)  # no bundle needed to classify
    error = harness.classify(code, timed_out, output, "", 60.0, None)
    assert (type(error).__name__ if error else None) == error_class


@pytest.mark.parametrize(("litellm_error", "error_class"), [
    ("AuthenticationError", "AgentAuthenticationError"), ("NotFoundError", "ModelNotFoundError"),
    ("RateLimitError", "ApiRateLimitError"), ("InternalServerError", "ApiInternalServerError"),
    ("BadRequestError", "BadRequestError"), ("ContentPolicyViolationError", "AgentSafetyRefusalError"),
])
def test_mini_swe_agents_model_errors_are_their_classes(litellm_error, error_class):
    from agentcompass.core.models import import_litellm
    from agentcompass.core.schema import ModelConfig
    from agentcompass.harnesses.mini_swe_agent import classify

    exc = getattr(import_litellm().exceptions, litellm_error)(message="no", llm_provider="openai", model="m")
    assert type(classify(exc, ModelConfig(name="openai/m"), None)).__name__ == error_class


def test_the_table_decides_per_format():
    from agentcompass.core import errors as e

    harbor, tb1, swebench = "harbor", "grades_after_agent_error", "errors_not_graded"
    assert e.decide(e.AgentTimeoutError("t"), harbor) == e.Policy(False, True, True)
    assert e.decide(e.BadRequestError("b"), harbor) == e.Policy(False, True, False)
    assert e.decide(e.AgentAuthenticationError("a"), harbor) == e.Policy(False, False, False)
    assert e.decide(e.ApiRateLimitError("r"), harbor).retried
    assert e.decide(e.AgentAuthenticationError("a"), tb1) == e.Policy(False, True, True)  # terminal-bench grades all
    assert e.decide(e.AgentTimeoutError("t"), swebench) == e.Policy(False, False, False)  # the rule counts it
    assert e.decide(e.AgentSpoiledSandboxError("s"), swebench) == e.Policy(False, False, True)


# -- timeout multipliers -------------------------------------------------------------------------------------------
def test_multipliers_show_in_config_show_and_stretch_the_effective_limits(tmp_path):
    shown = run_cli("config", "show", "demo", "oracle", "none", "--timeout-multiplier", "2",
                    "--verifier-timeout-multiplier", "1.5", "run.agent_max_timeout_sec=100")
    assert shown.returncode == 0, shown.stderr
    assert "timeout_multiplier: 2.0" in shown.stdout and "verifier_timeout_multiplier: 1.5" in shown.stdout
    assert "agent_max_timeout_sec: 100.0" in shown.stdout
    # A solution that needs 3 s under an agent limit of 1 s: timed out unsolved, then solved with the limit x 5.
    make_task(tmp_path / "tasks", "slow-solution", solve=f"sleep 3\n{ANSWER}", test=CHECKS_ANSWER, agent_timeout=1)
    rows, _, _ = run_dataset(tmp_path / "plain", tmp_path / "tasks", "oracle")
    assert (rows["slow-solution"]["status"], rows["slow-solution"]["agent_exit_status"]) == ("failed", "timeout")
    rows, _, _ = run_dataset(tmp_path / "stretched", tmp_path / "tasks", "oracle", "--agent-timeout-multiplier", "5")
    assert rows["slow-solution"]["status"] == "passed", rows
    # ... and the cap comes before the multiplier, as in Harbor: min(1, 0.5) x 5 = 2.5 s, still too short.
    rows, _, _ = run_dataset(tmp_path / "capped", tmp_path / "tasks", "oracle", "--agent-timeout-multiplier", "5",
                             "run.agent_max_timeout_sec=0.5")
    assert rows["slow-solution"]["status"] == "failed", rows


# -- a stand-in agent that solves the task and then fails with a chosen class --------------------------------------
STAND_IN = '''
from agentcompass.core import errors
from agentcompass.core.schema import Strict


class SolveThenFail:
    """Does the task's reference solution, then fails with the class its settings name."""

    needs_model = False

    class Settings(Strict):
        error: str

    def __init__(self, **settings):
        self.settings = self.Settings.model_validate(settings)

    def run(self, task, sandbox, model, trial, task_format):
        done = task_format.solve(task, sandbox, trial)
        raise getattr(errors, self.settings.error)(f"stand-in solved ({done.exit_status}), then failed")
'''


def run_stand_in(tmp_path: Path, dataset: Path, error: str) -> tuple[dict, dict]:
    conf = tmp_path / "conf"
    (conf / "harnesses").mkdir(parents=True, exist_ok=True)
    (conf / "harnesses" / "solve_then_fail.yaml").write_text(
        "name: solve_then_fail\ndescription: solves, then fails\nimpl: solve_then_fail:SolveThenFail\n"
        f"needs_model: false\nerror: {error}\n")
    (tmp_path / "stand_in").mkdir(exist_ok=True)
    (tmp_path / "stand_in" / "solve_then_fail.py").write_text(STAND_IN)
    make_recipe(conf, "stand_in", dataset, extra="scoring: valid_reward\n")
    run_name = f"ec-{uuid.uuid4().hex[:8]}"
    done = run_cli("run", "stand_in", "solve_then_fail", "none", "--config-dir", str(conf), "--results-dir",
                   str(tmp_path / "res"), "--run-name", run_name, "--max-retries", "0", timeout=300,
                   env={"PYTHONPATH": f"{REPO}:{tmp_path / 'stand_in'}"})
    assert done.returncode == 0, done.stderr[-3000:]
    [run_dir] = (tmp_path / "res" / run_name).glob("*__*")
    rows = {r["task_id"]: r for r in map(json.loads, (run_dir / "trials.jsonl").read_text().splitlines())}
    return rows, json.loads((run_dir / "summary.json").read_text())


@pytest.mark.parametrize(("error", "status", "reward", "in_base"), [
    ("AgentTimeoutError", "passed", 1.0, True), ("NonZeroAgentExitCodeError", "passed", 1.0, True),
    ("ContextWindowExceededError", "passed", 1.0, True), ("OutputLengthExceededError", "passed", 1.0, True),
    ("AgentSafetyRefusalError", "passed", 1.0, True), ("AgentError", "passed", 1.0, True),
    ("BadRequestError", "error", 1.0, False), ("AgentAuthenticationError", "error", None, False),
    ("ModelNotFoundError", "error", None, False), ("AgentSpoiledSandboxError", "failed", None, True),
])
def test_each_agent_class_on_a_harbor_task_and_its_steps(tmp_path, error, status, reward, in_base):
    """Single-step and multi-step (each step graded after its agent's error, as Harbor's multi-step trial does)."""
    from harbor_factory import make_multi_step

    make_task(tmp_path / "tasks", "single", solve=ANSWER, test=CHECKS_ANSWER)
    make_multi_step(tmp_path / "tasks", "steps", None, first_min_reward=1.0)
    rows, summary = run_stand_in(tmp_path, tmp_path / "tasks", error)
    for task in ("single", "steps"):
        row = rows[task]
        assert (row["status"], row["retries"]) == (status, 0), (task, row)
        if task == "single" or reward is None:
            assert row["reward"] == reward, (task, row)
        if status == "passed" and task == "steps":  # both steps ran, each graded after its agent's error
            assert [s.get("error_class") for s in row["details"]["steps"]] == [error, error], row
        else:
            assert row["details"]["error_class"] == error, (task, row)
    assert summary["pass_at_1_tasks"] == (2 if in_base else 0)


def test_tampered_attempts_show_in_the_summary_the_end_of_run_line_and_the_report(tmp_path, capsys):
    from agentcompass.core.results import TrialResult
    from agentcompass.core.run_summary import print_summary
    from agentcompass.core.scoring import RULES, summarize
    from agentcompass.report.build import banners

    stamp = "2026-01-01T00:00:00.000+00:00"
    rows = [TrialResult(task_id="a", attempt=1, status="failed", reward=1.0, started_at=stamp, finished_at=stamp,
                        message="tampered: a link out of its tree", details={"tampered": ["a link out of its tree"]}),
            TrialResult(task_id="b", attempt=1, status="passed", reward=1.0, started_at=stamp, finished_at=stamp)]
    summary = summarize(rows, ["a", "b"], 1, RULES["valid_reward"])
    assert (summary["tampered"], summary["pass_at_1"], summary["pass_at_1_tasks"]) == (1, 0.5, 2)
    print_summary(summary, tmp_path)
    assert "tampered 1 (failed)" in capsys.readouterr().out
    row = {"setup": "s", "status": "completed", "complete": True, "tampering": 0, "tampered": 1}
    assert any("1 attempt(s) failed for evidence that the agent attacked" in line for line in banners([row]))


def test_a_multiplier_is_in_run_json_and_the_fingerprint_so_a_resume_under_another_is_refused(tmp_path):
    make_task(tmp_path / "tasks", "quick", solve=ANSWER, test=CHECKS_ANSWER)
    conf = tmp_path / "conf"
    make_recipe(conf, "quick", tmp_path / "tasks")
    base = ("run", "quick", "oracle", "none", "--config-dir", str(conf), "--results-dir", str(tmp_path / "res"),
            "--run-name", "stretched")
    first = run_cli(*base, "--timeout-multiplier", "2", "--verifier-timeout-multiplier", "3")
    assert first.returncode == 0, first.stderr
    [run_json] = (tmp_path / "res" / "stretched").glob("*/run.json")
    recorded = json.loads(run_json.read_text())
    assert "timeout_multiplier" in json.dumps(recorded) and "verifier_timeout_multiplier" in json.dumps(recorded)
    again = run_cli(*base)
    assert again.returncode == 2 and "other settings" in again.stderr, again.stderr
    assert "run.timeout_multiplier: 2.0 -> unset" in again.stderr and "Traceback" not in again.stderr
