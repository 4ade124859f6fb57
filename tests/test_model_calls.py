"""model_calls.jsonl: one line per model call, written by the metering of mini_swe_agent's calls."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from fake_llm_server import FakeLLM
from test_mini_swe_agent import FIX_COMMANDS, read_trials, run_demo, run_dir

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
