"""A finished run's analysis: every attempt of trials.jsonl through the detectors and the failure
taxonomy, written to analysis.jsonl (a line per attempt) and analysis.json (the counts), both replaced
atomically. summary.json stays what trials.jsonl alone derives (docs/results.md), so the analysis has
its own files and can be rerun as the detectors improve."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentcompass.analyze.detectors import DETECTORS, Attempt, detect
from agentcompass.analyze.failures import failure_mode
from agentcompass.analyze.judge import Complete, Rubric, job_summary, judge_attempt, judge_flags, transcript
from agentcompass.analyze.rescore import read_analysis
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


@dataclass
class Judge:
    """The LLM judge of one analyze command: how to call its model, the rubric (and its text, for the cache key)."""

    complete: Complete
    rubric: Rubric
    rubric_text: str
    model_name: str


def instruction_in(directory: Path) -> str:
    """The task as the agent saw it, where its trajectory kept it (mini-swe-agent's first user message)."""
    for path in sorted(directory.glob("*.traj.json")):
        try:
            kept = json.loads(read_text(directory, path.name) or "{}").get("messages") or []
        except (ValueError, AttributeError):
            continue
        for message in kept:
            if isinstance(message, dict) and message.get("role") == "user":
                content = message.get("content")
                return content if isinstance(content, str) else json.dumps(content)
    return ""


def analyze_attempt(run_dir: Path, trial: dict[str, Any], harness: str | None, judge: Judge | None = None,
                    cached: dict[str, Any] | None = None) -> dict[str, Any]:
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
    verifier_log = read_text(directory, "verifier.log", LOG_CHARS)
    mode = failure_mode(trial, steps, verifier_log, report if isinstance(report, dict) else None)
    row = {"task_id": trial["task_id"], "attempt": trial["attempt"], "status": trial["status"],
           "flags": flags, "failure_mode": mode}
    if judge is not None and harness not in REFERENCE_HARNESSES:
        material = {"trial": trial, "steps": steps, "patches": attempt.patches, "verifier_log": verifier_log,
                    "instruction": instruction_in(directory), "transcript": transcript(steps)}
        record = judge_attempt(judge.complete, judge.rubric, judge.rubric_text, judge.model_name, material, cached)
        row["judge"] = record
        row["flags"] = flags + judge_flags(record, judge.rubric)
    return row


def check_finished(run_dir: Path) -> None:
    if not (run_dir / "trials.jsonl").is_file():
        raise UserError(f"analyze: {run_dir} has no trials.jsonl (no attempt finished yet); run it first, then analyze it")


def analyze_run(run_dir: Path, judge: Judge | None = None) -> dict[str, Any]:
    """Analyse every attempt of one run directory; write analysis.jsonl and analysis.json; return the summary.
    With a judge: each attempt's verdict too (one already given for the same material is reused), and the
    job-level summary of failure patterns."""
    check_finished(run_dir)
    trials, _problems = read_trials(run_dir / "trials.jsonl")
    harness = harness_of(run_dir)
    before = read_analysis(run_dir) if judge is not None else {}
    rows = [analyze_attempt(run_dir, trials[key].model_dump(), harness, judge, (before.get(key) or {}).get("judge"))
            for key in sorted(trials)]
    write_atomic(run_dir / "analysis.jsonl", "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows), fsync=True)
    summary = summarize(rows)
    if judge is not None:
        summary["judge"] = judge_summary(judge, rows)
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


def judge_summary(judge: Judge, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """analysis.json's judge part: the model, what its calls cost (a cached verdict cost nothing this time), each
    criterion's outcomes, the errors, and the job-level summary of failure patterns."""
    records = [r["judge"] for r in rows if "judge" in r]
    fresh = [r for r in records if not r.get("cached")]
    job, replies = job_summary(judge.complete, rows)
    checks: dict[str, Counter[str]] = {c.name: Counter() for c in judge.rubric.criteria}
    for record in records:
        for name, check in (record.get("checks") or {}).items():
            checks.setdefault(name, Counter())[check["outcome"]] += 1
    return {
        "model": judge.model_name, "attempts_judged": len(records), "cached": len(records) - len(fresh),
        "errors": [f"{r['task_id']}/{r['attempt']}: {r['judge']['error']}" for r in rows if "error" in r.get("judge", {})],
        "tokens_in": sum(r.get("tokens_in", 0) for r in fresh) + sum(x.tokens_in for x in replies),
        "tokens_out": sum(r.get("tokens_out", 0) for r in fresh) + sum(x.tokens_out for x in replies),
        "cost_usd": round(sum(r.get("cost_usd", 0.0) for r in fresh) + sum(x.cost_usd for x in replies), 6),
        "cost_known": all(r.get("cost_known", True) for r in fresh) and all(x.cost_known for x in replies),
        "checks": {name: dict(sorted(c.items())) for name, c in checks.items()},
        "failure_patterns": dict(Counter(str(r["failure_pattern"]) for r in records if r.get("failure_pattern")).most_common()),
        "job_summary": job.get("text"), **({"job_summary_error": job["error"]} if job.get("error") else {}),
    }
