"""A finished run's analysis: every attempt of trials.jsonl through the detectors and the failure
taxonomy, written to analysis.jsonl (a line per attempt) and analysis.json (the counts), both replaced
atomically. summary.json stays what trials.jsonl alone derives (docs/results.md), so the analysis has
its own files and can be rerun as the detectors improve."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from agentcompass.analyze.detectors import DETECTORS, Attempt, detect
from agentcompass.analyze.failures import failure_mode
from agentcompass.core.errors import UserError
from agentcompass.core.results import now_iso, read_trials, write_atomic
from agentcompass.core.safe_files import contained
from agentcompass.view.trajectory import steps_of

PATCH_FILES = ("patch.diff", "submission.diff", "agent1.patch", "agent2.patch", "merged.diff")
REFERENCE_HARNESSES = {"oracle"}  # runs the task's own solution: reading it is the point, so never flagged
LOG_CHARS = 2_000_000  # of verifier.log, for the failing tests' names


def run_dirs(path: Path) -> list[Path]:
    """The run directories under PATH (a run, a run name holding a sweep's runs, or a results root)."""
    if (path / "trials.jsonl").is_file() or (path / "run.json").is_file():
        return [path]
    found = sorted(p.parent for p in path.glob("*/run.json")) or sorted(p.parent for p in path.glob("*/*/run.json"))
    if not path.is_dir() or not found:
        raise UserError(f"analyze: {path} is no run (no trials.jsonl or run.json in it or the folders below); "
                        f"name a run's directory, e.g. results/<run_name>/<setup>, or a run name")
    return found


def harness_of(run_dir: Path) -> str | None:
    try:
        harness = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))["config"]["harness"]
    except (OSError, ValueError, KeyError, TypeError):
        parts = run_dir.name.split("__")
        return parts[1] if len(parts) > 1 else None
    return harness.get("name") if isinstance(harness, dict) else str(harness)


def read_text(directory: Path, name: str, limit: int | None = None) -> str:
    path = contained(directory, directory / name)  # no link out of the attempt is followed
    if path is None or not path.is_file():
        return ""
    with open(path, encoding="utf-8", errors="replace") as handle:
        return handle.read(limit if limit is not None else -1)


def internet_allowed(details: dict[str, Any]) -> bool | None:
    """Whether the agent's phase had the internet, as its record says (core/trial.py's agent_network); None
    where it does not say, or where an allowlist let some hosts through (a download from one is honest)."""
    if details.get("agent_network") == "allowlist":
        return None
    if "allow_internet" in details:
        return bool(details["allow_internet"])
    return False if details.get("network_mode") == "none" else None


def analyze_attempt(run_dir: Path, trial: dict[str, Any], harness: str | None) -> dict[str, Any]:
    directory = run_dir / "tasks" / trial["task_id"] / f"attempt-{trial['attempt']}"
    steps = steps_of(directory, harness) if directory.is_dir() else []
    details = trial.get("details") or {}
    attempt = Attempt(steps=steps, details=details, internet_allowed=internet_allowed(details),
                      patches={name: text for name in PATCH_FILES if (text := read_text(directory, name))})
    flags = detect(attempt)
    if harness in REFERENCE_HARNESSES:
        flags = [f for f in flags if f["detector"] == "integrity"]
    try:
        report = json.loads(read_text(directory, "report.json") or "null")
    except ValueError:
        report = None
    mode = failure_mode(trial, steps, read_text(directory, "verifier.log", LOG_CHARS),
                        report if isinstance(report, dict) else None)
    return {"task_id": trial["task_id"], "attempt": trial["attempt"], "status": trial["status"],
            "flags": flags, "failure_mode": mode}


def check_finished(run_dir: Path) -> None:
    if not (run_dir / "trials.jsonl").is_file():
        raise UserError(f"analyze: {run_dir} has no trials.jsonl (no attempt finished yet); run it first, then analyze it")


def analyze_run(run_dir: Path) -> dict[str, Any]:
    """Analyse every attempt of one run directory; write analysis.jsonl and analysis.json; return the summary."""
    check_finished(run_dir)
    trials, _problems = read_trials(run_dir / "trials.jsonl")
    harness = harness_of(run_dir)
    rows = [analyze_attempt(run_dir, trials[key].model_dump(), harness) for key in sorted(trials)]
    write_atomic(run_dir / "analysis.jsonl", "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows), fsync=True)
    summary = summarize(rows)
    summary.update(run_dir=str(run_dir), harness=harness, generated_at=now_iso())
    write_atomic(run_dir / "analysis.json", json.dumps(summary, indent=2, sort_keys=True) + "\n", fsync=True)
    return summary


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    flagged = [r for r in rows if r["flags"]]
    return {
        "attempts": len(rows),
        "passed": sum(r["status"] == "passed" for r in rows),
        "flagged": len(flagged),
        "passed_not_flagged": sum(r["status"] == "passed" and not r["flags"] for r in rows),
        "flags": dict(sorted(Counter(f["detector"] for r in rows for f in r["flags"]).items())),
        "failure_modes": dict(sorted(Counter(r["failure_mode"]["mode"] for r in rows if r["failure_mode"]).items())),
        "detectors": sorted(DETECTORS),
    }
