"""model_calls.jsonl: one line per model call, written by the metering of mini_swe_agent's calls."""

from __future__ import annotations

import json
from datetime import datetime
from decimal import Decimal

import pytest

from fake_llm_server import FakeLLM
from mini_demo import FIX_COMMANDS, read_trials, run_demo, run_dir

TASK = "fix-median-bug"


def calls_of(directory):
    return [json.loads(line) for line in (directory / "tasks" / TASK / "attempt-1" / "model_calls.jsonl").read_text().splitlines()]


def epoch(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def test_each_call_has_its_times_tokens_and_status_and_failed_ones_are_recorded(tmp_path):
    llm = FakeLLM(FIX_COMMANDS, revoke_after=2)  # two replies, then the key is refused
    run_demo(llm, tmp_path, "openai_compatible", "model.name=fake-coder-1")
    directory = run_dir(tmp_path / "results")
    [trial] = read_trials(directory)
    calls = calls_of(directory)
    assert [c["status"] for c in calls] == ["ok", "ok", "error"]
    assert calls[2]["tokens_in"] == 0 and calls[2]["cost_usd"] is None
    served = [r.usage for r in llm.successes]
    assert [(c["tokens_in"], c["tokens_out"], c["tokens_cached"]) for c in calls[:2]] == [
        (u["prompt_tokens"], u["completion_tokens"], u["prompt_tokens_details"]["cached_tokens"]) for u in served]
    # Inside the trial, in order, not overlapping (one agent asks one question at a time).
    assert epoch(trial["started_at"]) - 0.01 <= calls[0]["start"]
    assert calls[-1]["end"] <= epoch(trial["finished_at"]) + 0.01
    for before, after in zip(calls, calls[1:]):
        assert before["start"] < before["end"] <= after["start"] < after["end"]
    assert sum(c["duration_s"] for c in calls) == pytest.approx(trial["usage"]["generation_s"], abs=1e-3)
    assert trial["usage"]["model_calls"] == 2


def test_a_tier_sweep_against_the_scripted_endpoint_reports_and_verifies(tmp_path):
    """glm-5.2 (self-hosted, $50.7/h) over two tiers: the report splits the hourly rate over the
    union of the recorded call intervals, and --verify recomputes it from the raw files."""
    from conftest import run_cli

    llm = FakeLLM(FIX_COMMANDS)
    run_demo(llm, tmp_path, "glm-5.2", "-m", "model.reasoning=none,high")
    run = tmp_path / "results" / "test"
    proc = run_cli("report", str(run), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    intervals = sorted((c["start"], c["end"]) for p in run.glob("*/tasks/*/attempt-1/model_calls.jsonl")
                       for c in map(json.loads, p.read_text().splitlines()))
    assert len(intervals) == 6  # two jobs of three calls
    union, reach = 0.0, float("-inf")  # the jobs ran one after the other: the union is the plain sum
    for start, end in intervals:
        union += max(0.0, end - max(start, reach))
        reach = max(reach, end)
    report = json.loads((run / "report" / "report.json").read_text())
    total = sum(float(s["total_cost_usd"]) for s in report["setups"])
    assert total == pytest.approx(50.7 * union / 3600, abs=2e-6)
    assert {s["reasoning"] for s in report["setups"]} == {"none", "high"}
    # Alone on the endpoint, each trial's share is its sole cost (rounded up to the micro-dollar).
    for t in report["trials"]:
        assert t["cost_basis"] == "hourly split"
        assert 0 <= Decimal(t["sole_cost_usd"]) - Decimal(t["cost_usd"]) <= Decimal("0.000001"), t
    verified = run_cli("report", str(run), "--verify", cwd=tmp_path)
    assert verified.returncode == 0, verified.stdout + verified.stderr
