"""The results store: trials.jsonl is the truth, summary.json is derived from it.

Every file is written atomically (temp file, then rename); trials.jsonl grows by one
complete line per finished attempt, so a kill at any instant loses at most the trials
in flight, and a rerun with the same run name resumes from what is recorded.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import threading
from datetime import datetime, timezone
from math import comb
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from agentcompass.task import Usage


class TrialResult(BaseModel):
    task_id: str
    attempt: int
    status: str  # passed | failed | error
    error_category: str | None = None  # infra | agent | verifier
    message: str = ""
    reward: float | None = None
    rewards: dict[str, float] = Field(default_factory=dict)
    agent_exit_status: str | None = None
    timings: dict[str, float] = Field(default_factory=dict)  # seconds per phase
    usage: Usage = Field(default_factory=Usage)
    retries: int = 0
    started_at: str
    finished_at: str
    details: dict[str, Any] = Field(default_factory=dict)


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, data: Any) -> None:
    write_atomic(path, json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every complete JSON line; a torn last line (killed mid-write) is skipped."""
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def read_trials(path: Path) -> tuple[dict[tuple[str, int], TrialResult], list[str]]:
    """The trials of a trials.jsonl, the last line per (task, attempt) winning (a retried error
    supersedes its first record), and one message per line that is not a trial (skipped).

    An unterminated last line is a write still in flight (or cut by a kill): skipped silently."""
    if not path.is_file():
        return {}, []
    results: dict[tuple[str, int], TrialResult] = {}
    problems = []
    data = path.read_bytes()
    lines = data.split(b"\n")
    complete = lines[:-1]  # after the last newline: nothing, or a fragment
    for number, line in enumerate(complete, start=1):
        if not line.strip():
            continue
        try:
            result = TrialResult.model_validate_json(line)
        except ValidationError as exc:
            problems.append(f"{path}:{number}: not a trial ({' '.join(str(exc.errors()[0]['msg']).split())}: "
                            f"{line[:80].decode('utf-8', 'replace')}); skipped")
            continue
        results[(result.task_id, result.attempt)] = result
    return results, problems


def repair_tail(path: Path) -> str | None:
    """Make trials.jsonl end with a newline before anything is appended, so the next record
    never glues onto a torn one: a complete trial missing only its newline is terminated,
    any other fragment (a write cut short) is cut off. Returns what was done, if anything."""
    if not path.is_file():
        return None
    with path.open("rb+") as handle:
        size = handle.seek(0, os.SEEK_END)
        if size == 0:
            return None
        handle.seek(size - 1)
        if handle.read(1) == b"\n":
            return None
        handle.seek(0)
        data = handle.read()
        start = data.rfind(b"\n") + 1
        fragment = data[start:]
        try:
            TrialResult.model_validate_json(fragment)
        except ValidationError:
            handle.truncate(start)
            action = f"{path}: cut off an unfinished last line ({len(fragment)} bytes); that attempt runs again"
        else:
            handle.write(b"\n")
            action = f"{path}: ended the last line, which lacked its newline"
        handle.flush()
        os.fsync(handle.fileno())
    return action


class ResultsStore:
    def __init__(self, run_dir: Path) -> None:
        self.dir = run_dir
        self.trials_path = run_dir / "trials.jsonl"
        self._lock = threading.Lock()

    def finished(self, warn: bool = False) -> dict[tuple[str, int], TrialResult]:
        """What trials.jsonl records; `warn` prints one line per line that is not a trial."""
        results, problems = read_trials(self.trials_path)
        if warn:
            for problem in problems:
                print(f"warning: {problem}", file=sys.stderr, flush=True)
        return results

    def repair(self) -> None:
        """Called once, under the run lock, before the first append of a session."""
        action = repair_tail(self.trials_path)
        if action:
            print(f"warning: {action}", file=sys.stderr, flush=True)

    def trial_dir(self, task_id: str, attempt: int) -> Path:
        return self.dir / "tasks" / task_id / f"attempt-{attempt}"

    def fresh_trial_dir(self, task_id: str, attempt: int) -> Path:
        """An empty dir for an attempt: leftovers of an unfinished earlier try are removed."""
        path = self.trial_dir(task_id, attempt)
        if path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True)
        return path

    def record(self, result: TrialResult) -> None:
        line = (result.model_dump_json() + "\n").encode("utf-8")
        write_json(self.trial_dir(result.task_id, result.attempt) / "result.json", result.model_dump(mode="json"))
        with self._lock:
            # One write() on an O_APPEND descriptor: the line lands whole or not at all.
            fd = os.open(self.trials_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line)
                os.fsync(fd)
            finally:
                os.close(fd)


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimator of Chen et al. (2021): 1 - C(n-c, k) / C(n, k)."""
    if n == 0:
        return 0.0
    k = min(k, n)
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def summarize(results: list[TrialResult], task_ids: list[str], k: int, sessions: list[dict[str, Any]] = (),
              count_errors_as_failures: bool = False) -> dict[str, Any]:
    """The summary fields, computed as the README's "Summary fields" defines them."""
    by_task: dict[str, list[TrialResult]] = {t: [] for t in task_ids}
    for r in results:
        if r.task_id in by_task and 1 <= r.attempt <= k:
            by_task[r.task_id].append(r)
    trials = [r for rs in by_task.values() for r in rs]
    usage = sum((r.usage for r in trials), Usage())
    errors_by_category: dict[str, int] = {}
    for r in trials:
        if r.status == "error":
            key = r.error_category or "infra"
            errors_by_category[key] = errors_by_category.get(key, 0) + 1
    # Graded attempts: passed or failed; an error is no verdict on the agent unless the user says so.
    graded = {t: [r for r in rs if r.status != "error" or count_errors_as_failures] for t, rs in by_task.items()}

    def pass_at(kk: int) -> tuple[float | None, int]:
        """Mean of the unbiased estimator over the tasks with at least kk graded attempts."""
        scored = [pass_at_k(len(rs), sum(r.status == "passed" for r in rs), kk) for rs in graded.values() if len(rs) >= kk]
        return (round(sum(scored) / len(scored), 6) if scored else None), len(scored)

    pass_1, pass_1_tasks = pass_at(1)
    pass_k, pass_k_tasks = pass_at(k)
    attempted = sum(bool(rs) for rs in by_task.values())
    solved = sum(any(r.status == "passed" for r in rs) for rs in by_task.values())
    return {
        "tasks": len(task_ids),
        "tasks_attempted": attempted,
        "tasks_unattempted": len(task_ids) - attempted,
        "k": k,
        "trials_expected": len(task_ids) * k,
        "trials": len(trials),
        "passed": sum(r.status == "passed" for r in trials),
        "failed": sum(r.status == "failed" for r in trials),
        "errors": sum(r.status == "error" for r in trials),
        "errors_by_category": errors_by_category,
        "count_errors_as_failures": count_errors_as_failures,
        "pass_at_1": pass_1,
        "pass_at_1_tasks": pass_1_tasks,
        "pass_at_k": pass_k,
        "pass_at_k_tasks": pass_k_tasks,
        "solved_tasks": solved,
        "solved_rate": round(solved / len(task_ids), 6) if task_ids else None,
        "cost_usd": round(usage.cost_usd, 6),
        "cost_known": usage.cost_known,
        "cost_per_solved_usd": round(usage.cost_usd / solved, 6) if solved else None,
        "model_calls": usage.model_calls,
        "tokens_in": usage.tokens_in,
        "tokens_out": usage.tokens_out,
        "tokens_cached": usage.tokens_cached,
        "generation_s": round(usage.generation_s, 3),
        "active_s": round(active_seconds(sessions), 3),
        "updated_at": now_iso(),
    }


def active_seconds(sessions: list[dict[str, Any]]) -> float:
    """Sum of each session's span (start to its last recorded end, or now while it runs):
    the gaps between a kill and a resume are not run time."""
    total = 0.0
    for session in sessions:
        start = datetime.fromisoformat(session["started_at"])
        end = datetime.fromisoformat(session["ended_at"]) if session.get("ended_at") else datetime.now(timezone.utc)
        total += max(0.0, (end - start).total_seconds())
    return total
