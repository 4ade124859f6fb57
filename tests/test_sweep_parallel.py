"""Pooled sweeps (`-m ... --sweep-parallel`): every job at once in one pool under one --task-concurrency,
trials round-robin across jobs, each job its own results directory, lock, fingerprint and summary.

What overlapped is read from the records a run leaves: each trial's started_at/finished_at in
trials.jsonl and each model call's start/end in model_calls.jsonl."""

from __future__ import annotations

import json
import os
import subprocess
from datetime import datetime
from pathlib import Path

import pytest

from conftest import run_cli
from dead_endpoints import silent_endpoint
from fake_llm_server import FakeLLM, FakeLLMServer
from mini_demo import FIX_COMMANDS, ONLY_TASK, interrupt_and_check, isolated_env, wait_for

TIERS = ("none", "high", "max")
SWEEP = ("-m", "model.reasoning=" + ",".join(TIERS))


def epoch(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def trials_of(job: Path) -> list[dict]:
    return [json.loads(line) for line in (job / "trials.jsonl").read_text().splitlines()]


def windows(run: Path) -> list[tuple[float, float, str]]:
    """Every trial of every job of the sweep: (started, finished, job dir)."""
    return [(epoch(t["started_at"]), epoch(t["finished_at"]), path.parent.name)
            for path in sorted(run.glob("*/trials.jsonl")) for t in trials_of(path.parent)]


def calls(run: Path) -> list[tuple[float, float, str]]:
    """Every model call of every job: (start, end, job dir)."""
    return [(c["start"], c["end"], path.relative_to(run).parts[0]) for path in sorted(run.glob("*/tasks/*/*/model_calls.jsonl"))
            for c in map(json.loads, path.read_text().splitlines())]


def most_at_once(intervals: list[tuple[float, float, str]]) -> int:
    """The most intervals open at one instant (an end before a start at the same instant)."""
    events = sorted([(s, 1) for s, _, _ in intervals] + [(e, -1) for _, e, _ in intervals])
    level = peak = 0
    for _, change in events:
        level += change
        peak = max(peak, level)
    return peak


def across_jobs(intervals: list[tuple[float, float, str]]) -> list[tuple[str, str]]:
    """Pairs of jobs with intervals that overlap in time."""
    return sorted({(a[2], b[2]) for a in intervals for b in intervals
                   if a[2] < b[2] and a[0] < b[1] and b[0] < a[1]})


def union_s(intervals: list[tuple[float, float, str]]) -> float:
    total, reach = 0.0, float("-inf")
    for start, end, _ in sorted(intervals):
        total += max(0.0, end - max(start, reach))
        reach = max(reach, end)
    return total


# -- the demo with oracle and nop: round-robin, one cap, each job's own records ------------------------------


def harness_order(run: Path) -> list[str]:
    """Which job each trial belonged to, in the order the trials started."""
    return [job.split("__")[1] for _, _, job in sorted(windows(run))]


@pytest.mark.parametrize("how", ["flag", "config"])
def test_a_pooled_sweep_interleaves_its_jobs_round_robin_under_one_cap(cli, tmp_path, how):
    pooled = ["--sweep-parallel"]
    if how == "config":
        overlay = tmp_path / "pooled.yaml"
        overlay.write_text("run:\n  sweep_parallel: true\n")
        pooled = ["--config", str(overlay)]
    common = ("run", "demo", "oracle,nop", "none", "-m", "--benchmark-params", '{"limit": 3}',
              "--task-concurrency", "1", "--results-dir", str(tmp_path / "results"))
    proc = cli(*common, "--run-name", "pooled", *pooled, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    sequential = cli(*common, "--run-name", "sequential", cwd=tmp_path)
    assert sequential.returncode == 0, sequential.stderr
    results = tmp_path / "results"
    # One trial at a time: pooled, the jobs take turns; in sequence, one job ends before the next starts.
    assert harness_order(results / "pooled") == ["oracle", "nop"] * 3
    assert harness_order(results / "sequential") == ["oracle"] * 3 + ["nop"] * 3
    for job in sorted((results / "pooled").glob("demo__*")):
        run_info = json.loads((job / "run.json").read_text())
        summary = json.loads((job / "summary.json").read_text())
        assert run_info["status"] == "completed" and run_info["config"]["run"]["sweep_parallel"] is True
        assert (summary["trials"], summary["passed"]) == (3, 3 if "oracle" in job.name else 0), summary
        assert f"results: {job}" in proc.stdout
        logged = [json.loads(line) for line in (job / "log.jsonl").read_text().splitlines()]
        assert [(e["event"], e.get("run_dir")) for e in logged if "run_dir" in e] == [("run started", str(job))]
    sweep = json.loads((results / "pooled" / "sweep.json").read_text())
    assert sorted(row["dir"] for row in sweep["runs"]) == ["demo__nop__none__local", "demo__oracle__none__local"]


def test_a_pooled_sweep_needs_one_task_concurrency(cli, tmp_path):
    proc = cli("run", "demo", "oracle", "none", "-m", "run.task_concurrency=1,2", "--sweep-parallel",
               "--results-dir", str(tmp_path / "results"), cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "one --task-concurrency" in proc.stderr, proc.stderr
    assert not (tmp_path / "results").exists()


# -- mini_swe_agent over three GLM tiers against the scripted endpoint ----------------------------------------


def run_tiers(tmp: Path, llm: FakeLLM, run_name: str, *args: str) -> Path:
    with FakeLLMServer(llm) as server:
        proc = run_cli("run", "demo", "mini_swe_agent", "glm-5.2", *SWEEP, "--model-base-url", server.base_url,
                       "--benchmark-params", ONLY_TASK, "--results-dir", str(tmp / "results"), "--run-name", run_name,
                       *args, cwd=tmp, env=isolated_env(tmp))
    assert proc.returncode == 0, proc.stderr
    return tmp / "results" / run_name


@pytest.fixture(scope="module")
def tier_sweeps(tmp_path_factory) -> tuple[Path, Path]:
    """The same three-tier sweep pooled (two trials at once) and in sequence; each reply takes 1 s."""
    tmp = tmp_path_factory.mktemp("tiers")
    pooled = run_tiers(tmp, FakeLLM(FIX_COMMANDS, delay_s=1.0), "pooled", "--sweep-parallel", "--task-concurrency", "2")
    sequential = run_tiers(tmp, FakeLLM(FIX_COMMANDS, delay_s=1.0), "sequential", "--task-concurrency", "2")
    return pooled, sequential


def test_the_pooled_tiers_overlapped_in_time_under_the_cap_and_the_sequential_ones_did_not(tier_sweeps):
    pooled, sequential = tier_sweeps
    jobs = [f"demo__mini_swe_agent__glm-5.2__local__model.reasoning={tier}" for tier in TIERS]
    for run in tier_sweeps:
        assert sorted(p.name for p in run.glob("demo__*")) == sorted(jobs)
        assert all(t["status"] == "passed" for job in jobs for t in trials_of(run / job))
        assert len(calls(run)) == 9  # three jobs of one trial of three calls
    assert most_at_once(windows(pooled)) == 2  # --task-concurrency 2 caps the pool, not each job
    assert across_jobs(windows(pooled)) and across_jobs(calls(pooled))
    assert most_at_once(windows(sequential)) == 1
    assert across_jobs(windows(sequential)) == [] and across_jobs(calls(sequential)) == []
    for job in jobs:
        assert json.loads((pooled / job / "run.json").read_text())["status"] == "completed"


def test_report_on_the_pooled_sweep_splits_the_shared_endpoint_and_verifies(tier_sweeps):
    pooled, _ = tier_sweeps
    proc = run_cli("report", str(pooled))
    assert proc.returncode == 0, proc.stderr
    report = json.loads((pooled / "report" / "report.json").read_text())
    assert sorted(s["reasoning"] for s in report["setups"]) == sorted(TIERS)
    assert len({s["setup"] for s in report["setups"]}) == 3
    # The endpoint costs $50.7 an hour of the union of generation time; overlapping calls share it.
    recorded = calls(pooled)
    total = sum(float(s["total_cost_usd"]) for s in report["setups"])
    assert total == pytest.approx(50.7 * union_s(recorded) / 3600, abs=5e-6)
    sole = sum(float(t["sole_cost_usd"]) for t in report["trials"])
    assert union_s(recorded) < sum(e - s for s, e, _ in recorded) - 0.5  # the calls did overlap
    assert total < sole - 0.5 * 50.7 / 3600
    verified = run_cli("report", str(pooled), "--verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr


# -- Ctrl-C, locks, resume and fingerprints of a pooled sweep ---------------------------------------------------


def start_tiers(tmp: Path, base_url: str, run_name: str) -> tuple[subprocess.Popen, Path]:
    stderr = tmp / "stderr.txt"
    env = {**os.environ, **isolated_env(tmp), "PYTHONFAULTHANDLER": "1"}
    env.pop("AGENTCOMPASS_DEBUG", None)
    proc = subprocess.Popen(
        [*run_args(tmp, base_url, run_name), "--sweep-parallel", "--no-model-check"],
        cwd=tmp, env=env, stdout=subprocess.DEVNULL, stderr=open(stderr, "w"))
    return proc, stderr


def run_args(tmp: Path, base_url: str, run_name: str) -> list[str]:
    import sys

    return [sys.executable, "-m", "agentcompass", "run", "demo", "mini_swe_agent", "glm-5.2", *SWEEP,
            "--model-base-url", base_url, "--benchmark-params", ONLY_TASK, "--results-dir", str(tmp / "results"),
            "--run-name", run_name]


def test_ctrl_c_ends_a_pooled_sweep_and_a_rerun_resumes_every_job(tmp_path):
    run_name = f"pooled-ctrlc-{os.getpid()}"
    run = tmp_path / "results" / run_name
    with silent_endpoint() as (base_url, accepted):
        proc, stderr = start_tiers(tmp_path, base_url, run_name)
        try:
            wait_for(lambda: len(accepted) >= 3, 90, "a model call of every tier")  # all three jobs in flight
            # Each job's lock holds while it runs: the same sweep again is refused, and writes nothing.
            again = subprocess.run([*run_args(tmp_path, base_url, run_name), "--sweep-parallel", "--no-model-check"],
                                   cwd=tmp_path, env={**os.environ, **isolated_env(tmp_path)},
                                   capture_output=True, text=True, timeout=120)
            assert again.returncode == 2 and "is in use by process" in again.stderr, again.stderr
            for job in run.glob("demo__*"):  # still the first sweep's, and only its session
                assert (job / ".lock").read_text().strip() == str(proc.pid)
                assert len(json.loads((job / "run.json").read_text())["sessions"]) == 1
            interrupt_and_check(proc, stderr, run_name)
        finally:
            if proc.poll() is None:
                proc.kill()
    jobs = sorted(run.glob("demo__*"))
    assert len(jobs) == 3
    for job in jobs:
        run_info = json.loads((job / "run.json").read_text())
        assert run_info["status"] == "interrupted" and run_info["sessions"][-1]["status"] == "interrupted"
        assert not (job / "trials.jsonl").exists() or trials_of(job) == []  # trials in flight are not recorded
    # A rerun of the same sweep resumes every job; a rerun with other settings is refused, job by job.
    with FakeLLMServer(FakeLLM(FIX_COMMANDS)) as server:
        other = subprocess.run([*run_args(tmp_path, server.base_url, run_name), "--sweep-parallel", "--k", "2"],
                               cwd=tmp_path, env={**os.environ, **isolated_env(tmp_path)},
                               capture_output=True, text=True, timeout=300)
        assert other.returncode == 2 and "holds a run with other settings (run.k: 1 -> 2" in other.stderr, other.stderr
        resumed = subprocess.run([*run_args(tmp_path, server.base_url, run_name), "--sweep-parallel"],
                                 cwd=tmp_path, env={**os.environ, **isolated_env(tmp_path)},
                                 capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    for tier in TIERS:
        assert f"model.reasoning={tier}: resuming: 0 of 1 trials done" in resumed.stderr, resumed.stderr
    for job in jobs:
        run_info = json.loads((job / "run.json").read_text())
        assert run_info["status"] == "completed" and [s["status"] for s in run_info["sessions"]] == [
            "interrupted", "completed"]
        assert [t["status"] for t in trials_of(job)] == ["passed"]
