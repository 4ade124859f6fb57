"""The run's rates with flagged attempts scored as failures (`analyze --flagged-as failed`), and what the
report and the viewer read of analysis.jsonl. The run's own files (trials.jsonl, summary.json) are never
changed: the re-scored summary is a file of its own beside them, so both verdicts stay readable."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentcompass.core.results import TrialResult, read_jsonl, read_trials, write_atomic
from agentcompass.core.safe_files import contained
from agentcompass.core.scoring import rule_for, summarize

ANALYSIS_FILE = "analysis.jsonl"
RESCORED_FILE = "summary.flagged-as-failed.json"


def read_analysis(run_dir: Path) -> dict[tuple[str, int], dict[str, Any]]:
    """analysis.jsonl's rows by (task_id, attempt); {} when the run was never analysed (or the file is a link
    out of the run, never followed)."""
    path = contained(run_dir, run_dir / ANALYSIS_FILE)
    if path is None or not path.is_file():
        return {}
    rows = {}
    for row in read_jsonl(path):
        if isinstance(row, dict) and "task_id" in row and isinstance(row.get("attempt"), int):
            rows[(str(row["task_id"]), row["attempt"])] = row
    return rows


def flag_names(row: dict[str, Any] | None) -> list[str]:
    """The detectors (and the judge) that flagged an attempt, each once, in order."""
    names = [str(f.get("detector")) for f in (row or {}).get("flags") or [] if isinstance(f, dict)]
    return list(dict.fromkeys(names))


def failure_name(row: dict[str, Any] | None) -> str | None:
    mode = (row or {}).get("failure_mode")
    return str(mode.get("mode")) if isinstance(mode, dict) and mode.get("mode") else None


def as_failed(result: TrialResult, row: dict[str, Any]) -> TrialResult:
    """A flagged pass, scored as a failure: a copy, with why in its details."""
    return result.model_copy(update={"status": "failed", "details": {**result.details, "flagged": flag_names(row)}})


def rescored_results(results: list[TrialResult], analysis: dict[tuple[str, int], dict[str, Any]]) -> list[TrialResult]:
    return [as_failed(r, row) if r.status == "passed" and (row := analysis.get((r.task_id, r.attempt))) and row.get("flags")
            else r for r in results]


def run_selection(run_dir: Path, results: list[TrialResult]) -> tuple[list[str], int, Any]:
    """The run's selected tasks, k and scoring rule, from run.json (what summary.json was computed with);
    where run.json does not say: the tasks and attempts recorded, and the default rule."""
    try:
        info = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        info = {}
    config = info.get("config") if isinstance(info, dict) else None
    config = config if isinstance(config, dict) else {}
    run = config.get("run") if isinstance(config.get("run"), dict) else {}
    rule = rule_for((config.get("benchmark") or {}).get("scoring"), run.get("count_errors_as_failures"))
    tasks = info.get("tasks") if isinstance(info, dict) else None
    task_ids = list(tasks) if isinstance(tasks, list) else sorted({r.task_id for r in results})
    k = run.get("k") if isinstance(run.get("k"), int) else max((r.attempt for r in results), default=1)
    return task_ids, k, rule


def flagged_counts(results: list[TrialResult], analysis: dict[tuple[str, int], dict[str, Any]]) -> dict[str, int]:
    rows = [analysis.get((r.task_id, r.attempt)) for r in results]
    return {"flagged": sum(bool(row and row.get("flags")) for row in rows),
            "passed_flagged": sum(bool(r.status == "passed" and row and row.get("flags")) for r, row in zip(results, rows))}


def write_rescored(run_dir: Path) -> dict[str, Any]:
    """summary.flagged-as-failed.json: the run's summary with every flagged pass scored as a failure."""
    trials, _ = read_trials(run_dir / "trials.jsonl")
    results = list(trials.values())
    task_ids, k, rule = run_selection(run_dir, results)
    analysis = read_analysis(run_dir)
    summary = summarize(rescored_results(results, analysis), task_ids, k, rule)
    summary.update(flagged_counts(results, analysis), flagged_as="failed",
                   flagged_attempts=[f"{r.task_id}/{r.attempt}" for r in results
                                     if r.status == "passed" and analysis.get((r.task_id, r.attempt), {}).get("flags")])
    write_atomic(run_dir / RESCORED_FILE, json.dumps(summary, indent=2) + "\n", fsync=True)
    return summary
