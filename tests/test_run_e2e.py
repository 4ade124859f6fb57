"""End to end on the local provider: the demo, attempts, retries, resume after SIGKILL, interrupts."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from harbor_factory import make_file_tasks, make_recipe, make_task

DEMO_TASKS = sorted(p.parent.name for p in (Path(__file__).resolve().parent.parent / "recipes" / "demo").glob("*/task.toml"))


def read_trials(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "trials.jsonl").read_text().splitlines()]


def summary_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


@pytest.mark.parametrize("harness,expected", [("oracle", "passed"), ("nop", "failed")])
def test_demo_on_local(cli, tmp_path, harness, expected):
    result = cli("run", "demo", harness, "none", "--results-dir", str(tmp_path), "--run-name", "demo", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    run_dir = tmp_path / "demo" / f"demo__{harness}__none__local"
    trials = read_trials(run_dir)
    assert sorted(t["task_id"] for t in trials) == DEMO_TASKS and len(DEMO_TASKS) >= 5
    assert {t["status"] for t in trials} == {expected}
    summary = summary_of(run_dir)
    assert summary["tasks"] == len(DEMO_TASKS) and summary["errors"] == 0
    assert summary["passed"] == (len(DEMO_TASKS) if expected == "passed" else 0)
    assert summary["cost_usd"] == 0 and summary["tokens_in"] == 0
    # The demo's verifiers print; agent.log is kept where the agent printed (nop does; some solutions don't).
    expected = {"result.json", "verifier.log"} | ({"agent.log"} if harness == "nop" else set())
    for task_id in DEMO_TASKS:
        attempt = run_dir / "tasks" / task_id / "attempt-1"
        assert expected <= {p.name for p in attempt.iterdir()}
    run_json = json.loads((run_dir / "run.json").read_text())
    assert run_json["status"] == "completed" and run_json["versions"]["agentcompass"]
    log_lines = [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()]
    assert [line["event"] for line in log_lines] == ["run started", "run finished"]  # per trial: trials.jsonl


def test_k_attempts_and_unbiased_pass_at_k(cli, tmp_path):
    data = tmp_path / "data"
    # Every other attempt of this task passes: a counter file outside the sandbox decides
    # (not under /tmp, which each sandbox gets privately).
    counter = Path(tempfile.mkdtemp(dir="/var/tmp")) / "counter"
    counter.write_text("0")
    make_task(data, "flaky", solve="true",
              test=f'n=$(cat {counter}); echo $((n+1)) > {counter}; '
                   'if [ $((n % 2)) -eq 0 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt')
    make_task(data, "never", solve="true", test="echo 0 > /logs/verifier/reward.txt")
    make_recipe(tmp_path / "conf", "mixed", data)
    result = cli("run", "mixed", "oracle", "none", "--k", "4", "--task-concurrency", "1", "--config-dir",
                 str(tmp_path / "conf"), "--env-params", '{"isolation": "none"}', "--results-dir", str(tmp_path / "r"),
                 "--run-name", "k", cwd=tmp_path)
    shutil.rmtree(counter.parent)
    assert result.returncode == 0, result.stderr
    summary = summary_of(tmp_path / "r" / "k" / "mixed__oracle__none__local")
    # flaky: n=4, c=2 -> pass@1 = 0.5, pass@4 = 1; never: 0 and 0.
    assert summary["trials"] == 8 and summary["passed"] == 2
    assert summary["pass_at_1"] == pytest.approx((0.5 + 0) / 2)
    assert summary["pass_at_k"] == pytest.approx((1 + 0) / 2)


FLAKY_PROVIDER = textwrap.dedent("""
    from pathlib import Path
    from agentcompass.core.errors import InfraError
    from agentcompass.providers.local.provider import LocalProvider

    class FlakyProvider(LocalProvider):
        '''Fails the first `failures` opens of every trial, as a flaky cloud would.'''
        Settings = None

        def __init__(self, failures=1, state=".", **kw):
            super().__init__(isolation="none", **kw)
            self.failures, self.state = failures, Path(state)

        def open(self, spec):
            marker = self.state / spec.name
            seen = int(marker.read_text()) if marker.exists() else 0
            marker.write_text(str(seen + 1))
            if seen < self.failures:
                raise InfraError(f"simulated outage #{seen + 1}")
            return super().open(spec)
""")


@pytest.mark.parametrize("failures,max_retries,status", [(2, 2, "passed"), (3, 2, "error"), (1, 0, "error")])
def test_infra_errors_are_retried_with_backoff(cli, tmp_path, failures, max_retries, status):
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "flaky_env.py").write_text(FLAKY_PROVIDER)
    conf = tmp_path / "conf"
    (conf / "providers").mkdir(parents=True)
    (conf / "providers" / "flaky.yaml").write_text(
        f"name: flaky\nimpl: flaky_env:FlakyProvider\nfailures: {failures}\nstate: {tmp_path}\n")
    data = tmp_path / "data"
    make_file_tasks(data, 1)
    make_recipe(conf, "one", data)
    result = cli("run", "one", "oracle", "none", "--env", "flaky", "--config-dir", str(conf), "--max-retries",
                 str(max_retries), "run.retry_backoff_s=0.01", "--results-dir", str(tmp_path / "r"), "--run-name", "x",
                 cwd=tmp_path, env={"PYTHONPATH": str(tmp_path / "plugins")})
    assert result.returncode == 0, result.stderr
    (trial,) = read_trials(tmp_path / "r" / "x" / "one__oracle__none__flaky")
    assert trial["status"] == status
    if status == "error":
        assert trial["error_category"] == "infra" and "simulated outage" in trial["message"]
    else:
        assert trial["retries"] == failures


def test_missing_reward_file_is_a_verifier_error_not_a_zero(cli, tmp_path):
    data = tmp_path / "data"
    make_task(data, "noreward", solve="true", test="echo 'forgot to write the reward'")
    make_task(data, "agenttimeout", solve="sleep 30", test="echo 1 > /logs/verifier/reward.txt", agent_timeout=1)
    make_recipe(tmp_path / "conf", "broken", data)
    result = cli("run", "broken", "oracle", "none", "--config-dir", str(tmp_path / "conf"),
                 "--results-dir", str(tmp_path / "r"), "--run-name", "x", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    trials = {t["task_id"]: t for t in read_trials(tmp_path / "r" / "x" / "broken__oracle__none__local")}
    assert trials["noreward"]["status"] == "error" and trials["noreward"]["error_category"] == "verifier"
    assert "reward.txt" in trials["noreward"]["message"]
    # The agent timed out, and verification still ran (its test passes whatever the agent did).
    assert trials["agenttimeout"]["agent_exit_status"] == "timeout"
    assert trials["agenttimeout"]["status"] == "passed"
    assert trials["agenttimeout"]["timings"]["agent"] < 25  # its 1 s limit on a busy machine, not the 30 s sleep


def test_multirun_makes_one_directory_per_value(cli, tmp_path):
    result = cli("run", "demo", "oracle", "none", "-m", "run.k=1,2", "--benchmark-params", '{"limit": 2}',
                 "--results-dir", str(tmp_path), "--run-name", "sweep", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    root = tmp_path / "sweep"
    dirs = sorted(p.name for p in root.iterdir() if p.is_dir())
    assert dirs == ["demo__oracle__none__local__run.k=1", "demo__oracle__none__local__run.k=2"]
    assert [summary_of(root / d)["trials"] for d in dirs] == [2, 4]
    sweep = json.loads((root / "sweep.json").read_text())
    assert sorted(r["dir"] for r in sweep["runs"]) == dirs
    assert list(tmp_path.iterdir()) == [root]  # Hydra wrote nothing elsewhere


def start_run(tmp_path: Path, count: int, sleep: float | str, extra: list[str] = ()) -> tuple[subprocess.Popen, Path]:
    data = tmp_path / "data"
    make_file_tasks(data, count, solve_extra=f"sleep {sleep}")
    make_recipe(tmp_path / "conf", "slow", data)
    argv = [sys.executable, "-m", "agentcompass", "run", "slow", "oracle", "none", "--config-dir",
            str(tmp_path / "conf"), "--results-dir", str(tmp_path / "r"), "--run-name", "x",
            "--task-concurrency", "2", *extra]
    proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, tmp_path / "r" / "x" / "slow__oracle__none__local"


def wait_for_trials(run_dir: Path, count: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        path = run_dir / "trials.jsonl"
        if path.exists() and len(path.read_text().splitlines()) >= count:
            return
        time.sleep(0.05)
    raise AssertionError(f"fewer than {count} trials finished in {timeout}s")


def test_resume_after_sigkill_runs_each_attempt_exactly_once(cli, tmp_path):
    proc, run_dir = start_run(tmp_path, 8, sleep=0.7)
    wait_for_trials(run_dir, 2)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    before = read_trials(run_dir)
    assert 2 <= len(before) < 8
    result = cli("run", "slow", "oracle", "none", "--config-dir", str(tmp_path / "conf"), "--results-dir",
                 str(tmp_path / "r"), "--run-name", "x", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    after = read_trials(run_dir)
    assert sorted(t["task_id"] for t in after) == [f"t{i:03d}" for i in range(8)]
    assert after[: len(before)] == before  # kept, not re-run
    assert summary_of(run_dir)["passed"] == 8
    assert len(json.loads((run_dir / "run.json").read_text())["resumed_at"]) == 1


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_closes_everything_and_writes_partial_summary(tmp_path, sig):
    workspaces = tmp_path / "ws"
    sleep = f"7.77{os.getpid()}{int(sig)}"  # about 7.8 s, and a command line no other test worker's run has
    proc, run_dir = start_run(tmp_path, 6, sleep=sleep, extra=["--env-params", json.dumps({"root": str(workspaces)})])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and f"sleep {sleep}" not in os.popen("ps -eo args").read():
        time.sleep(0.05)
    assert f"sleep {sleep}" in os.popen("ps -eo args").read(), "trials never started"
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    time.sleep(0.3)
    assert f"sleep {sleep}" not in os.popen("ps -eo args").read()  # no process of the run is left
    assert list(workspaces.iterdir()) == []  # every sandbox closed
    run_json = json.loads((run_dir / "run.json").read_text())
    assert run_json["status"] == "interrupted"
    assert summary_of(run_dir)["trials"] == 0  # interrupted trials are not recorded as finished
