"""Scores that mean what the official leaderboards mean: no reward the agent can write, every agent error a
failed attempt, one definition of each rate in the run's summary, sweep.json and the report, and every
call a try paid for in the totals."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from agentcompass.core.calls import CALLS_FILE
from agentcompass.core.results import TrialResult
from agentcompass.core.scoring import RULES, summarize
from agentcompass.core.task import Usage
from conftest import run_cli
from fake_llm_server import FakeLLM, FakeLLMServer
from harbor_factory import make_recipe, make_task
from mini_demo import FIX_COMMANDS, ONLY_TASK, TASK, isolated_env

DATA = Path(__file__).resolve().parent / "data"


def trials_of(run_dir: Path) -> dict[str, dict]:
    return {row["task_id"]: row for row in map(json.loads, (run_dir / "trials.jsonl").read_text().splitlines())}


def summary_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def csv_rows(path: Path) -> dict[str, dict]:
    return {row["setup"]: row for row in csv.DictReader(path.read_text().splitlines())}


# ---- reward integrity -----------------------------------------------------------------------------------

PLANT = "mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt"


def planted_tasks(root: Path) -> None:
    """Agents (the tasks' solutions) that write their own reward, or their own tests, and do not solve the task."""
    make_task(root, "plant-txt", solve=PLANT, test="exit 1")  # test.sh writes nothing
    make_task(root, "plant-json", solve=PLANT, test="echo '{\"reward\": 0}' > /logs/verifier/reward.json")
    make_task(root, "plant-tests", test="echo 0 > /logs/verifier/reward.txt",
              solve="mkdir -p /tests && printf 'echo 1 > /logs/verifier/reward.txt\\n' > /tests/test.sh")


@pytest.mark.parametrize("env", ["local", pytest.param("docker", marks=pytest.mark.docker)])
def test_a_planted_reward_never_counts(cli, tmp_path, env, request):
    dataset, conf = tmp_path / "tasks", tmp_path / "conf"
    planted_tasks(dataset)
    if env == "docker":
        base = request.getfixturevalue("base_image")
        for task in dataset.iterdir():
            (task / "environment" / "Dockerfile").write_text(f"FROM {base}\nWORKDIR /app\n")
    make_recipe(conf, "planted", dataset, runs_on_host=env == "local")
    run_name = f"p-{uuid.uuid4().hex[:8]}"
    done = cli("run", "planted", "oracle", "none", "--env", env, "--config-dir", str(conf), "--results-dir",
               str(tmp_path / "res"), "--run-name", run_name, "--max-retries", "0", timeout=900)
    assert done.returncode == 0, done.stderr
    run_dir = tmp_path / "res" / run_name / f"planted__oracle__none__{env}"
    rows = trials_of(run_dir)
    assert rows["plant-txt"]["status"] == "error" and rows["plant-txt"]["error_category"] == "verifier", rows["plant-txt"]
    assert "wrote neither" in rows["plant-txt"]["message"]
    assert (rows["plant-json"]["status"], rows["plant-json"]["reward"]) == ("failed", 0.0)  # reward.json first
    assert (rows["plant-tests"]["status"], rows["plant-tests"]["reward"]) == ("failed", 0.0)  # /tests afresh
    assert rows["plant-txt"]["details"]["tampering"] == ["/logs/verifier/reward.txt"]
    assert rows["plant-json"]["details"]["tampering"] == ["/logs/verifier/reward.txt"]
    planted = 2
    if env == "docker":  # on the host /tests is not the agent's to make (bubblewrap shows the host's root read-only)
        assert rows["plant-tests"]["details"]["tampering"] == ["/tests"]
        planted = 3
    summary = summary_of(run_dir)
    assert (summary["passed"], summary["solved_tasks"], summary["tampering"]) == (0, 0, planted)
    assert summary["pass_at_1"] == 0.0 and summary["pass_at_1_tasks"] == 3  # the verifier error is a failure too
    assert f"tampering {planted}" in done.stdout
    report = cli("report", str(run_dir))
    assert report.returncode == 0, report.stderr
    assert f"{planted} attempt(s) the agent wrote where the verifier reads" in report.stdout


@pytest.mark.docker
def test_terminal_bench_copies_its_tests_in_after_the_agent(cli, base_image, tmp_path):
    """A conftest.py the agent leaves in /tests would pass every test under pytest: it is gone before the tests come."""
    dataset = tmp_path / "tb"
    shutil.copytree(DATA / "terminal_bench" / "greeting-file", dataset / "greeting-file")
    task = dataset / "greeting-file"
    (task / "solution.sh").write_text(
        "mkdir -p /tests && cat > /tests/conftest.py <<'EOF'\nimport pytest\n"
        "@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
        "    outcome = yield\n    outcome.get_result().outcome = 'passed'\nEOF\n")
    run_name = f"tbt-{uuid.uuid4().hex[:8]}"
    done = cli("run", "terminal_bench", "oracle", "none", "--env", "docker", "--benchmark-params",
               json.dumps({"path": str(dataset)}), "--results-dir", str(tmp_path), "--run-name", run_name, timeout=900)
    assert done.returncode == 0, done.stderr
    row = trials_of(tmp_path / run_name / "terminal_bench__oracle__none__docker")["greeting-file"]
    assert row["status"] == "failed", row
    assert row["details"]["tampering"] == ["/tests"]


# ---- every attempt counts -------------------------------------------------------------------------------

@pytest.mark.docker
def test_terminal_bench_counts_a_task_whose_build_fails(cli, base_image, tmp_path):
    """terminal-bench's accuracy is resolved over all trials: a broken task next to a passing one is 0.5."""
    dataset = tmp_path / "tb"
    shutil.copytree(DATA / "terminal_bench" / "greeting-file", dataset / "greeting-file")
    shutil.copytree(DATA / "terminal_bench" / "greeting-file", dataset / "broken-build")
    dockerfile = dataset / "broken-build" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "RUN echo the build breaks && exit 3\n")
    run_name = f"tbb-{uuid.uuid4().hex[:8]}"
    done = cli("run", "terminal_bench", "oracle", "none", "--env", "docker", "--benchmark-params",
               json.dumps({"path": str(dataset)}), "--results-dir", str(tmp_path), "--run-name", run_name,
               "--max-retries", "0", timeout=900)
    assert done.returncode == 0, done.stderr
    run_dir = tmp_path / run_name / "terminal_bench__oracle__none__docker"
    rows = trials_of(run_dir)
    assert rows["greeting-file"]["status"] == "passed" and rows["broken-build"]["status"] == "error", rows
    summary = summary_of(run_dir)
    assert (summary["pass_at_1"], summary["pass_at_1_tasks"], summary["scoring_rule"]) == (0.5, 2, "every_attempt")
    assert summary["complete"] is True and "pass@1 0.500 over 2 tasks" in done.stdout


def test_a_model_that_answers_400_every_time_is_graded_without_a_valid_reward_as_under_harbor(tmp_path):
    """Harbor's BadRequestError: graded, not retried, no valid reward, so out of the Harbor-format demo's mean."""
    llm = FakeLLM(FIX_COMMANDS, failures=[400] * 50)
    with FakeLLMServer(llm) as server:
        proc = run_cli("run", "demo", "mini_swe_agent", "openai/fake-coder-1", "--model-base-url", server.base_url,
                       "--no-model-check", "--benchmark-params", ONLY_TASK, "--results-dir", str(tmp_path / "results"),
                       "--run-name", "bad-request", cwd=tmp_path, env=isolated_env(tmp_path))
    assert proc.returncode == 0, proc.stderr
    [run_dir] = [p.parent for p in (tmp_path / "results").glob("*/*/summary.json")]
    [row] = trials_of(run_dir).values()
    assert (row["status"], row["error_category"], row["details"]["error_class"]) == ("error", "agent", "BadRequestError"), row
    assert row["reward"] == 0.0 and row["retries"] == 0  # the verifier ran on what the agent (nothing) left
    summary = summary_of(run_dir)
    assert (summary["pass_at_1"], summary["pass_at_1_tasks"], summary["incomplete"], summary["complete"]) == (None, 0, 1, False)
    assert "pass@1 n/a over 0 of 1 tasks · 1 attempt incomplete (agent)" in proc.stdout


def result(task: str, attempt: int, status: str, category: str | None = None) -> TrialResult:
    return TrialResult(task_id=task, attempt=attempt, status=status, error_category=category, usage=Usage(),
                       started_at="2026-01-01T00:00:00+00:00", finished_at="2026-01-01T00:00:01+00:00")


def test_pass_at_k_is_over_every_task_with_a_verdict_when_attempts_errored():
    """k=4, three tasks, two solved, agent errors among the attempts: pass@4 is over all three tasks."""
    results = [result("A", 1, "passed"), result("A", 2, "error", "agent"), result("A", 3, "failed"),
               result("A", 4, "error", "agent"),
               result("B", 1, "error", "agent"), result("B", 2, "passed"), result("B", 3, "error", "agent"),
               result("B", 4, "failed"),
               *(result("C", a, "failed") for a in (1, 2, 3)), result("C", 4, "error", "agent")]
    s = summarize(results, ["A", "B", "C"], 4, RULES["errors_fail"])
    assert (s["pass_at_k"], s["pass_at_k_tasks"]) == (pytest.approx(2 / 3, abs=1e-6), 3)
    assert (s["pass_at_1"], s["pass_at_1_tasks"]) == (pytest.approx((0.25 + 0.25 + 0) / 3, abs=1e-6), 3)
    assert s["failed"] == 10 and s["errors_failed"] == 5 and s["complete"] is True


# ---- report on an interrupted run -----------------------------------------------------------------------

def interrupt_when(proc: subprocess.Popen, ready, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not ready() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ready(), "the run never got there"
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 130


def test_report_on_an_interrupted_run_is_over_the_selection(cli, tmp_path):
    dataset, conf = tmp_path / "tasks", tmp_path / "conf"
    make_task(dataset, "t0", solve="true", test="echo 1 > /logs/verifier/reward.txt")
    make_task(dataset, "t1", solve="true", test="echo 0 > /logs/verifier/reward.txt")
    for i in range(2, 6):
        make_task(dataset, f"t{i}", solve="sleep 30", test="echo 1 > /logs/verifier/reward.txt")
    make_recipe(conf, "six", dataset)
    run_dir = tmp_path / "res" / "i" / "six__oracle__none__local"
    proc = subprocess.Popen([sys.executable, "-m", "agentcompass", "run", "six", "oracle", "none", "--config-dir", str(conf),
                             "--results-dir", str(tmp_path / "res"), "--run-name", "i", "--task-concurrency", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    trials = run_dir / "trials.jsonl"
    interrupt_when(proc, lambda: trials.is_file() and len(trials.read_text().splitlines()) >= 2)
    report = cli("report", str(run_dir))
    assert report.returncode == 0, report.stderr
    row = csv_rows(run_dir / "report" / "summary.csv")["six__oracle__none__local"]
    assert (row["tasks"], row["solved_tasks"], row["status"], row["complete"]) == ("6", "1", "interrupted", "False")
    assert (row["pass_at_1"], row["pass_at_1_tasks"], row["not_run"]) == ("0.5", "2", "4")
    assert "six__oracle__none__local: the run is interrupted, not completed" in report.stdout
    page = (run_dir / "report" / "report.html").read_text()
    banner = page.split('id="banner-incomplete"')[1].split("</div>")[0]  # the page's incomplete-runs banner
    assert "run interrupted" in banner and "2 of 6 attempts recorded" in banner
    assert summary_of(run_dir)["solved_rate"] == pytest.approx(1 / 6, abs=1e-6)
    verified = cli("report", str(run_dir), "--verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr


# ---- costs ----------------------------------------------------------------------------------------------

def mini_sweep(tmp: Path, llm: FakeLLM, preset: str, *args: str) -> tuple[subprocess.CompletedProcess, Path]:
    with FakeLLMServer(llm) as server:
        proc = run_cli("run", "demo", "mini_swe_agent", preset, "--model-base-url", server.base_url, "--no-model-check",
                       "--benchmark-params", ONLY_TASK, "--results-dir", str(tmp / "results"), "--run-name", "s",
                       "-m", *args, cwd=tmp, env=isolated_env(tmp))
    assert proc.returncode == 0, proc.stderr
    return proc, tmp / "results" / "s"


def test_an_unpriced_model_costs_unknown_everywhere(tmp_path):
    proc, root = mini_sweep(tmp_path, FakeLLM(FIX_COMMANDS), "openai/fake-unpriced-7", "run.k=1,2")
    assert re.findall(r"cost (\S+)", proc.stdout)[:2] == ["unknown", "unknown"], proc.stdout
    assert "$0.0000" not in proc.stdout
    for run_dir in root.glob("*/summary.json"):
        summary = json.loads(run_dir.read_text())
        assert (summary["cost_usd"], summary["cost_known"], summary["cost_per_solved_usd"]) == (None, False, None)
    sweep = json.loads((root / "sweep.json").read_text())
    assert [(r["cost_usd"], r["cost_known"], r["cost_per_solved_usd"]) for r in sweep["runs"]] == [(None, False, None)] * 2
    table = proc.stdout[proc.stdout.index("RUN "):].splitlines()
    assert all(line.split()[-2:] == ["unknown", "unknown"] for line in table[1:3]), table
    report = run_cli("report", str(root), cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    assert all(r["total_cost_usd"] == "" for r in csv_rows(root / "report" / "summary.csv").values())
    verified = run_cli("report", str(root), "--verify", cwd=tmp_path)
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_a_pooled_self_hosted_sweep_costs_in_its_run_lines_what_the_report_splits(tmp_path):
    """glm-5.2 (self-hosted at $50.7/h), two tiers pooled on one endpoint at once: their calls overlap, so the
    sum of sole costs would count the shared hours twice; the run lines show the report's split."""
    llm = FakeLLM(FIX_COMMANDS, delay_s=0.6)
    proc, root = mini_sweep(tmp_path, llm, "glm-5.2", "model.reasoning=none,high", "--sweep-parallel",
                            "--task-concurrency", "2")
    report = run_cli("report", str(root), cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    rows = csv_rows(root / "report" / "summary.csv")
    assert {r["cost_basis"] for r in rows.values()} == {"hourly split"}
    # Each run's lines end with its results dir (the README: the last line, for `tail -1`).
    lines = {m.group(2): m.group(1) for m in re.finditer(r"cost \$(\S+).*\n(?:incomplete.*\n)?results: \S+/(demo__\S+)", proc.stdout)}
    assert len(lines) == 2, proc.stdout
    for setup, printed in lines.items():
        assert float(printed) == pytest.approx(float(rows[setup]["total_cost_usd"]), abs=5e-5), (setup, printed, rows)
        summary = summary_of(root / setup)
        assert summary["cost_usd"] == pytest.approx(float(rows[setup]["total_cost_usd"]), abs=1e-6)
        assert summary["cost_basis"] == "hourly split"
    sole = sum(float(t["sole_cost_usd"]) for t in json.loads((root / "report" / "report.json").read_text())["trials"])
    split = sum(float(r["total_cost_usd"]) for r in rows.values())
    assert split < sole  # the calls did overlap: the split is not the sum of sole costs
    sweep = {r["dir"]: r for r in json.loads((root / "sweep.json").read_text())["runs"]}
    assert all(sweep[s]["cost_usd"] == pytest.approx(float(rows[s]["total_cost_usd"]), abs=1e-6) for s in rows)
    verified = run_cli("report", str(root), "--verify", cwd=tmp_path)
    assert verified.returncode == 0, verified.stdout + verified.stderr


# ---- usage of tries cut short ---------------------------------------------------------------------------

def test_calls_of_interrupted_tries_count_in_the_totals(tmp_path):
    """Interrupted twice while the agent runs a command, then resumed: every reply the endpoint gave is counted."""
    llm = FakeLLM(["sleep 6 && " + FIX_COMMANDS[0], *FIX_COMMANDS[1:]])
    results = tmp_path / "results"
    with FakeLLMServer(llm) as server:
        argv = [sys.executable, "-m", "agentcompass", "run", "demo", "mini_swe_agent", "openai/fake-coder-1",
                "--model-base-url", server.base_url, "--no-model-check", "--benchmark-params", ONLY_TASK,
                "--results-dir", str(results), "--run-name", "cut"]
        env = {**os.environ, **isolated_env(tmp_path)}
        calls = results / "cut" / "demo__mini_swe_agent__openai_fake-coder-1__local" / "tasks" / TASK / "attempt-1" / CALLS_FILE
        for answered in (1, 2):
            proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            # the reply has reached the agent (its call is recorded), which now runs its 6 s command
            interrupt_when(proc, lambda: len(llm.successes) >= answered and calls.is_file())
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    [run_dir] = [p.parent for p in results.glob("*/*/summary.json")]
    [row] = trials_of(run_dir).values()
    assert row["status"] == "passed" and row["usage"]["model_calls"] == 3
    answered = len(llm.successes)
    assert answered == 5  # one reply in each cut-short session, three in the last
    summary = summary_of(run_dir)
    assert (summary["model_calls"], summary["abandoned_tries"]) == (answered, 2)
    assert summary["tokens_in"] == sum(r.usage["prompt_tokens"] for r in llm.successes)
    report = run_cli("report", str(run_dir), cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    row = csv_rows(run_dir / "report" / "summary.csv")[run_dir.name]
    assert int(row["steps"]) == answered and int(row["tokens_in"]) == summary["tokens_in"]
    verified = run_cli("report", str(run_dir), "--verify", cwd=tmp_path)
    assert verified.returncode == 0, verified.stdout + verified.stderr
