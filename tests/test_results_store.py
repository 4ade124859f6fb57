"""The results store's read side: the run lock, damaged trials.jsonl, resume, the summary's math."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from agentcompass.core.results import TrialResult, now_iso
from agentcompass.core.scoring import RULES, base_note, summarize
from agentcompass.core.task import Usage
from harbor_factory import make_file_tasks, make_recipe, make_task


def trial(task_id: str, attempt: int, status: str, category: str | None = None) -> TrialResult:
    return TrialResult(task_id=task_id, attempt=attempt, status=status, error_category=category,
                       usage=Usage(cost_usd=0.5), started_at="2026-01-01T00:00:00+00:00",
                       finished_at="2026-01-01T00:00:01+00:00")


# A: passed, failed, infra error. B: 3 passed. C: 3 failed. D: never attempted. E: one agent error.
# Plus lines the summary must ignore: a task outside the selection and an attempt beyond k.
RESULTS = [
    trial("A", 1, "passed"), trial("A", 2, "failed"), trial("A", 3, "error", "infra"),
    *(trial("B", a, "passed") for a in (1, 2, 3)), *(trial("C", a, "failed") for a in (1, 2, 3)),
    trial("E", 1, "error", "agent"), trial("Z", 1, "passed"), trial("B", 4, "passed"),
]
SESSIONS = [{"started_at": "2026-01-01T00:00:00+00:00", "ended_at": "2026-01-01T00:00:10+00:00"},
            {"started_at": "2026-01-01T01:00:00+00:00", "ended_at": "2026-01-01T01:00:05.5+00:00"}]


def summary(results=RESULTS, tasks=("A", "B", "C", "D", "E"), k=3, rule="errors_fail"):
    return summarize(results, list(tasks), k, RULES[rule])


def test_summary_fields_against_hand_computed_values():
    s = summary()
    assert (s["tasks"], s["tasks_attempted"], s["tasks_unattempted"]) == (5, 4, 1)
    # The agent error of E is a failed attempt; the infra error of A has no verdict.
    assert (s["trials_expected"], s["trials"], s["passed"], s["failed"], s["errors"]) == (15, 10, 4, 5, 2)
    assert s["errors_by_category"] == {"infra": 1, "agent": 1} and s["errors_failed"] == 1
    assert (s["incomplete"], s["incomplete_by_category"], s["not_run"], s["complete"]) == (1, {"infra": 1}, 5, False)
    # Over the tasks with a verdict: A 1 of 2 -> 0.5, B 1, C 0, E 0 of 1; D has none.
    assert s["pass_at_1"] == 0.375 and s["pass_at_1_tasks"] == 4
    # pass@3 over the same four: A (2 verdicts, 1 passed) 1, B 1, C 0, E 0.
    assert s["pass_at_k"] == 0.5 and s["pass_at_k_tasks"] == 4
    assert s["solved_tasks"] == 2 and s["solved_rate"] == 0.4  # A and B of all five selected
    assert s["cost_usd"] == 5.0 and s["cost_per_solved_usd"] == 2.5  # ten selected trials, two solved tasks


def test_every_attempt_counts_where_the_official_harness_counts_them_all():
    s = summary(rule="every_attempt")
    # A 1 of 3, B 1, C 0, E 0 of 1.
    assert s["pass_at_1"] == pytest.approx((1 / 3 + 1 + 0 + 0) / 4, abs=1e-6) and s["pass_at_1_tasks"] == 4
    # pass@3: A 1 - C(2,3)/C(3,3) = 1, B 1, C 0, E 0.
    assert s["pass_at_k"] == 0.5 and s["incomplete"] == 0 and s["failed"] == 6


def test_errors_leave_the_rate_only_when_the_rule_says_so():
    verifier = [*RESULTS, trial("D", 1, "error", "verifier")]
    # Harbor: no valid reward, no verdict. An agent error that is still an error (its class is not graded: a key or
    # a model the endpoint refused) has none either; the graded ones are recorded passed or failed by the trial.
    harbor = summary(verifier, rule="valid_reward")
    assert (harbor["pass_at_1_tasks"], harbor["incomplete_by_category"]) == (3, {"agent": 1, "infra": 1, "verifier": 1})
    mini = summary(verifier)
    assert mini["pass_at_1_tasks"] == 5 and mini["pass_at_1"] == pytest.approx(1.5 / 5)
    excluded = summary(rule="errors_excluded")  # run.count_errors_as_failures=false: the old reading
    assert excluded["pass_at_1"] == pytest.approx(1.5 / 3) and excluded["pass_at_1_tasks"] == 3


def test_no_verdict_gives_no_pass_rate_and_an_incomplete_run():
    s = summary([trial("A", 1, "error", "infra")], ["A"], k=1)
    assert s["pass_at_1"] is None and s["pass_at_1_tasks"] == 0 and s["solved_rate"] == 0
    assert s["cost_per_solved_usd"] is None and s["complete"] is False
    assert "over 0 of 1 tasks · 1 attempt incomplete (infra)" == base_note(s)


# ---- end to end on the local provider ----

def run_args(tmp_path: Path, *extra: str) -> list[str]:
    return ["run", "slow", "oracle", "none", "--config-dir", str(tmp_path / "conf"), "--results-dir",
            str(tmp_path / "r"), "--run-name", "x", "--env-params", '{"isolation": "none"}', *extra]


def make_slow(tmp_path: Path, count: int, sleep: float = 0.0) -> Path:
    make_file_tasks(tmp_path / "data", count, solve_extra=f"sleep {sleep}" if sleep else "")
    make_recipe(tmp_path / "conf", "slow", tmp_path / "data")
    return tmp_path / "r" / "x" / "slow__oracle__none__local"


def lines_of(run_dir: Path) -> list[str]:
    return (run_dir / "trials.jsonl").read_text().splitlines()


def summary_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def test_a_second_process_on_the_same_run_is_refused(cli, tmp_path):
    run_dir = make_slow(tmp_path, 4, sleep=2)
    first = subprocess.Popen([sys.executable, "-m", "agentcompass", *run_args(tmp_path, "--task-concurrency", "1")],
                             cwd=tmp_path,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (run_dir / ".lock").exists() or not (run_dir / ".lock").read_text().strip():
        assert time.monotonic() < deadline and first.poll() is None, "the first run never took its lock"
        time.sleep(0.05)
    second = cli(*run_args(tmp_path), cwd=tmp_path)
    assert second.returncode == 2, second.stderr
    (line,) = second.stderr.strip().splitlines()
    assert f"in use by process {first.pid}" in line and "Traceback" not in line
    assert first.wait(timeout=120) == 0, first.communicate()[1]
    assert sorted(json.loads(line)["task_id"] for line in lines_of(run_dir)) == [f"t{i:03d}" for i in range(4)]
    assert summary_of(run_dir)["trials"] == 4
    third = cli(*run_args(tmp_path), cwd=tmp_path)  # the lock went with its holder
    assert third.returncode == 0, third.stderr


def test_two_runs_started_together_run_each_trial_once(tmp_path):
    run_dir = make_slow(tmp_path, 4, sleep=5)
    procs = [subprocess.Popen([sys.executable, "-m", "agentcompass", *run_args(tmp_path)], cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outcomes = sorted((proc.wait(timeout=120), proc.communicate()[1]) for proc in procs)
    assert [code for code, _ in outcomes] == [0, 2], outcomes
    assert "in use by process" in outcomes[1][1]
    assert sorted(json.loads(line)["task_id"] for line in lines_of(run_dir)) == [f"t{i:03d}" for i in range(4)]


def test_a_torn_last_line_is_cut_and_its_attempt_runs_again(cli, tmp_path):
    run_dir = make_slow(tmp_path, 4)
    assert cli(*run_args(tmp_path), cwd=tmp_path).returncode == 0
    lines = lines_of(run_dir)
    # The last record cut mid-write, as a SIGKILL or a full disk leaves it.
    (run_dir / "trials.jsonl").write_text("\n".join(lines[:3]) + "\n" + lines[3][:40])
    result = cli(*run_args(tmp_path), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "unfinished last line" in result.stderr and "resuming: 3 of 4 trials done" in result.stderr
    after = [json.loads(line) for line in lines_of(run_dir)]
    assert sorted(t["task_id"] for t in after) == [f"t{i:03d}" for i in range(4)]
    assert summary_of(run_dir)["trials"] == 4 and summary_of(run_dir)["passed"] == 4


def test_a_complete_last_line_without_its_newline_is_kept(cli, tmp_path):
    run_dir = make_slow(tmp_path, 3)
    assert cli(*run_args(tmp_path), cwd=tmp_path).returncode == 0
    (run_dir / "trials.jsonl").write_text((run_dir / "trials.jsonl").read_text().rstrip("\n"))
    result = cli(*run_args(tmp_path), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "resuming: 3 of 3 trials done" in result.stderr
    assert len(lines_of(run_dir)) == 3 and (run_dir / "trials.jsonl").read_text().endswith("\n")


def test_lines_that_are_not_trials_are_skipped_and_reported(cli, tmp_path):
    run_dir = make_slow(tmp_path, 3)
    assert cli(*run_args(tmp_path), cwd=tmp_path).returncode == 0
    lines = lines_of(run_dir)
    (run_dir / "trials.jsonl").write_text("\n".join([lines[0], "null", '{"task_id": "t001"}', *lines[2:]]) + "\n")
    result = cli(*run_args(tmp_path), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 2
    assert f"{run_dir / 'trials.jsonl'}:2: not a trial" in warnings[0]
    assert f"{run_dir / 'trials.jsonl'}:3: not a trial" in warnings[1]
    assert "resuming: 2 of 3 trials done" in result.stderr  # t001's line was the one replaced
    assert summary_of(run_dir)["trials"] == 3 and summary_of(run_dir)["passed"] == 3


def test_retry_errors_reruns_recorded_errors_and_the_new_line_wins(cli, tmp_path, request):
    marker = Path(tempfile.mkdtemp(dir="/var/tmp")) / "fixed"  # outside /tmp, which each sandbox gets privately
    request.addfinalizer(lambda: shutil.rmtree(marker.parent))
    data = tmp_path / "data"
    make_task(data, "ok", solve="true", test="echo 1 > /logs/verifier/reward.txt")
    # The verifier writes no reward until the marker exists: a verifier error, then a pass.
    make_task(data, "flaky", solve="true", test=f"[ -e {marker} ] && echo 1 > /logs/verifier/reward.txt")
    make_recipe(tmp_path / "conf", "slow", data)
    run_dir = tmp_path / "r" / "x" / "slow__oracle__none__local"
    assert cli(*run_args(tmp_path), cwd=tmp_path).returncode == 0
    assert summary_of(run_dir)["errors_by_category"] == {"verifier": 1}
    marker.touch()
    plain = cli(*run_args(tmp_path), cwd=tmp_path)
    assert "resuming: 2 of 2 trials done" in plain.stderr and len(lines_of(run_dir)) == 2  # errors are kept
    retried = cli(*run_args(tmp_path, "--retry-errors"), cwd=tmp_path)
    assert retried.returncode == 0, retried.stderr
    assert "resuming: 1 of 2 trials done, 1 errors to retry" in retried.stderr
    records = [json.loads(line) for line in lines_of(run_dir)]
    assert [r["status"] for r in records if r["task_id"] == "flaky"] == ["error", "passed"]  # both kept, in order
    summary = summary_of(run_dir)
    assert (summary["trials"], summary["passed"], summary["errors"]) == (2, 2, 0)


def test_summary_of_a_run_with_errors(cli, tmp_path):
    data = tmp_path / "data"
    make_task(data, "ok", solve="true", test="echo 1 > /logs/verifier/reward.txt")
    make_task(data, "bad", solve="true", test="echo 0 > /logs/verifier/reward.txt")
    make_task(data, "broken", solve="true", test="echo no reward")
    make_recipe(tmp_path / "conf", "slow", data)
    run_dir = tmp_path / "r" / "x" / "slow__oracle__none__local"
    result = cli(*run_args(tmp_path, "--k", "2"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    s = summary_of(run_dir)
    # The verifier errors of "broken" are failed attempts: every selected task has a verdict.
    assert (s["trials"], s["passed"], s["failed"], s["errors"], s["errors_failed"]) == (6, 2, 4, 2, 2)
    third = pytest.approx(1 / 3, abs=1e-6)
    assert (s["pass_at_1"], s["pass_at_1_tasks"], s["pass_at_k"], s["pass_at_k_tasks"]) == (third, 3, third, 3)
    assert s["solved_tasks"] == 1 and s["solved_rate"] == third and s["complete"] is True
    assert "pass@1 0.333 over 3 tasks" in result.stdout and "solved 1/3" in result.stdout
    # Leaving errors out is a reading of the same trials: the run resumes, nothing reruns, and the base says so.
    result = cli(*run_args(tmp_path, "--k", "2", "run.count_errors_as_failures=false"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    s = summary_of(run_dir)
    assert (s["pass_at_1"], s["pass_at_1_tasks"]) == (0.5, 2) and s["trials"] == 6
    assert "pass@1 0.500 over 2 of 3 tasks · 2 attempts incomplete (verifier)" in result.stdout
    assert len(lines_of(run_dir)) == 6


def test_resume_refuses_other_settings_and_new_run_starts_beside_it(cli, tmp_path):
    run_dir = make_slow(tmp_path, 2)
    assert cli(*run_args(tmp_path), cwd=tmp_path).returncode == 0
    run_json = json.loads((run_dir / "run.json").read_text())
    assert run_json["config"]["env"]["isolation"] == "none"
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "r").rglob("*")}
    changed = cli(*run_args(tmp_path, "--k", "3", "--benchmark-params", '{"limit": 1}'), cwd=tmp_path)
    assert changed.returncode == 2
    (line,) = changed.stderr.strip().splitlines()
    assert "benchmark.params.limit: unset -> 1" in line and "run.k: 1 -> 3" in line and "--new-run" in line
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "r").rglob("*")} == before  # nothing written
    # What does not change a verdict does not block a resume.
    same = cli(*run_args(tmp_path, "--task-concurrency", "7", "--max-retries", "0"), cwd=tmp_path)
    assert same.returncode == 0 and "resuming: 2 of 2 trials done" in same.stderr
    fresh = cli(*run_args(tmp_path, "--k", "3", "--new-run"), cwd=tmp_path)
    assert fresh.returncode == 0, fresh.stderr
    beside = tmp_path / "r" / "x-2" / run_dir.name
    assert f"new run: {beside}" in fresh.stderr
    assert summary_of(beside)["trials"] == 6 and summary_of(run_dir)["trials"] == 2
    assert json.loads((beside / "run.json").read_text())["config"]["run"]["run_name"] == "x-2"


def test_run_json_records_the_isolation_that_ran(cli, tmp_path):
    run_dir = make_slow(tmp_path, 1)
    args = [a if a != '{"isolation": "none"}' else '{"isolation": "auto"}' for a in run_args(tmp_path)]
    assert cli(*args, cwd=tmp_path).returncode == 0
    isolation = json.loads((run_dir / "run.json").read_text())["config"]["env"]["isolation"]
    assert isolation in ("bwrap", "none")


def test_a_sweep_ends_with_a_table_and_sweep_json_has_k(cli, tmp_path):
    make_slow(tmp_path, 2)
    result = cli(*run_args(tmp_path, "-m", "run.k=1,2"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("RUN "))
    assert lines[header].split() == ["RUN", "K", "PASS@1", "OVER", "PASS@K", "SOLVED", "ERRORS", "INCOMPLETE", "COST",
                                     "COST/SOLVED"]
    assert lines[header + 1].split()[:8] == ["run.k=1", "1", "1.000", "2/2", "1.000", "2/2", "0", "0"]
    assert lines[header + 2].split()[:8] == ["run.k=2", "2", "1.000", "2/2", "1.000", "2/2", "0", "0"]
    assert lines[header + 3] == f"sweep: {tmp_path / 'r' / 'x' / 'sweep.json'}"
    assert "an estimate" not in result.stdout  # no model call: the $0 is exact (a spending sweep's is starred)
    sweep = json.loads((tmp_path / "r" / "x" / "sweep.json").read_text())
    assert [row["k"] for row in sweep["runs"]] == [1, 2]
    assert all(row["cost_is_estimate"] is False and "cost_per_solved_usd" in row for row in sweep["runs"])
    assert all(row["complete"] is True and row["cost_known"] is True and row["status"] == "completed" for row in sweep["runs"])


def test_summary_is_refreshed_while_the_run_goes_on(tmp_path):
    run_dir = make_slow(tmp_path, 6, sleep=2.5)
    proc = subprocess.Popen([sys.executable, "-m", "agentcompass", *run_args(tmp_path, "--task-concurrency", "1")],
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            path = run_dir / "summary.json"
            if path.exists() and summary_of(run_dir)["trials"] > 0:
                break
            time.sleep(0.2)
        assert proc.poll() is None, "the run ended before its summary was refreshed"
        summary = summary_of(run_dir)
        assert 0 < summary["trials"] <= len(lines_of(run_dir)) and summary["active_s"] > 5
        run_json = json.loads((run_dir / "run.json").read_text())
        assert run_json["status"] == "running" and run_json["sessions"][-1]["ended_at"]
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.mark.parametrize("processes", [1, 2])
def test_sigkill_at_ten_random_instants_then_finish(cli, tmp_path, processes):
    """Every (task, attempt) recorded exactly once, and summary.json agrees with trials.jsonl."""
    run_dir = make_slow(tmp_path, 12, sleep=0.5)
    args = run_args(tmp_path, "--k", "2", "--task-concurrency", "3", f"run.processes={processes}")
    rng = random.Random(os.environ.get("KILL_SEED", "8.6"))
    for session in range(1, 11):
        proc = subprocess.Popen([sys.executable, "-m", "agentcompass", *args], cwd=tmp_path,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 60  # start-up is slow on a busy machine: the instants count from the session's start
        while len(sessions_of(run_dir)) < session and proc.poll() is None:
            assert time.monotonic() < deadline, "the run never started"
            time.sleep(0.02)
        time.sleep(rng.uniform(0, 0.8))
        os.killpg(proc.pid, signal.SIGKILL)  # the run and every process it started
        proc.wait()
    recorded = lines_of(run_dir) if (run_dir / "trials.jsonl").exists() else []  # busy machine: maybe none finished
    assert len(recorded) < 24, "the kills came too late to interrupt anything"
    result = cli(*args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in lines_of(run_dir)]
    keys = sorted((r["task_id"], r["attempt"]) for r in records)
    assert keys == sorted((f"t{i:03d}", a) for i in range(12) for a in (1, 2))  # each exactly once
    summary = summary_of(run_dir)
    assert summary["trials"] == len(records) == 24
    assert summary["passed"] == sum(r["status"] == "passed" for r in records)
    assert summary["errors"] == sum(r["status"] == "error" for r in records)
    assert json.loads((run_dir / "run.json").read_text())["status"] == "completed"
    assert len(sessions_of(run_dir)) == 11


def sessions_of(run_dir: Path) -> list[dict]:
    try:
        return json.loads((run_dir / "run.json").read_text()).get("sessions", [])
    except (OSError, ValueError):
        return []


def test_now_iso_is_utc_to_the_millisecond_across_seconds():
    """The stamps trials record: datetime's isoformat to the millisecond, right on either side of a second."""
    stamps = []
    deadline = time.monotonic() + 1.2
    while time.monotonic() < deadline:
        before = datetime.now(timezone.utc)
        stamp = now_iso()
        after = datetime.now(timezone.utc)
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00", stamp), stamp
        # datetime rounds to the microsecond where now_iso cuts: up to 1 us apart, so one ms of slack
        assert before - timedelta(milliseconds=1) <= datetime.fromisoformat(stamp) <= after
        stamps.append(stamp)
        time.sleep(0.0005)
    assert len({stamp[:19] for stamp in stamps}) >= 2 and stamps == sorted(stamps)


def test_usages_add_field_by_field():
    one = Usage(model_calls=1, tokens_in=10, tokens_out=5, tokens_cached=2, tokens_cache_write=1, cost_usd=0.25,
                cli_cost_usd=0.3, generation_s=1.5, model_errors=1)
    two = Usage(model_calls=2, tokens_in=20, tokens_out=7, tokens_cached=3, cost_usd=0.5, cost_known=False,
                generation_s=2.0, model_errors=0)
    assert (one + two).model_dump() == {"model_calls": 3, "tokens_in": 30, "tokens_out": 12, "tokens_cached": 5,
                                        "tokens_cache_write": 1, "cost_usd": 0.75, "cost_known": False,
                                        "cli_cost_usd": 0.3, "generation_s": 3.5, "model_errors": 1}
    assert Usage.total([one, two]).model_dump() == (one + two).model_dump()
    assert (two + two).cli_cost_usd is None  # no CLI figure anywhere: none, not 0
    assert (Usage() + one).model_dump() == one.model_dump() and (one + Usage()).cost_known


def test_read_if_present_reads_whole_files_of_any_size(tmp_path):
    from agentcompass.core.results import READ_SIZE, read_if_present

    for size in (0, 1, READ_SIZE - 1, READ_SIZE, READ_SIZE + 1, 3 * READ_SIZE + 5):
        data = os.urandom(size)
        (tmp_path / "f").write_bytes(data)
        assert read_if_present(tmp_path / "f") == data
    assert read_if_present(tmp_path / "absent") is None and read_if_present(tmp_path) is None
