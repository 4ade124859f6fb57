"""The results store: trials.jsonl is the truth, summary.json is derived from it.

Every file is written atomically (temp file, then rename); trials.jsonl grows by one
complete line per finished attempt, so a kill at any instant loses at most the trials
in flight, and a rerun with the same run name resumes from what is recorded.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import sys
import threading
import time
from datetime import datetime, timezone
from math import comb
from pathlib import Path
from typing import Any

import structlog
from pydantic import BaseModel, Field, ValidationError

from agentcompass.durable import DurableAppender, fsync_dir, write_file
from agentcompass.task import Usage

log = structlog.get_logger("agentcompass")


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


_SECOND = (-1, "")  # the last whole second now_iso formatted, and how


def now_iso() -> str:
    """UTC to the millisecond, as datetime's isoformat(timespec="milliseconds") writes it: every trial
    stamps its start and end, so the date part is formatted once a second, not per call."""
    global _SECOND
    now = time.time()
    second = int(now)
    cached = _SECOND  # one read: another thread may replace it meanwhile, never half of it
    if cached[0] != second:
        cached = _SECOND = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
    return f"{cached[1]}.{int((now - second) * 1000):03d}+00:00"


_PID = os.getpid()
_SERIAL = itertools.count()  # next() is atomic under the GIL: each write gets its own temp name


def _forked() -> None:
    global _PID
    _PID = os.getpid()  # a worker process (agentcompass.shards) writes temp files beside its parent's


os.register_at_fork(after_in_child=_forked)


def write_atomic(path: Path | str, text: str, fsync: bool = False) -> None:
    """Write to a temp file beside `path`, then rename. `fsync` also makes the content durable
    before the rename and the rename durable after it (run.json, summary.json): two fsyncs.
    Plain os calls on strings, four in all: trials write several files each, thousands at a time."""
    parent, name = os.path.split(os.fspath(path))
    tmp = os.path.join(parent, f".{name}.{_PID}.{next(_SERIAL)}.tmp")
    try:
        write_file(tmp, text.encode("utf-8"), make_dir=True, fsync=fsync)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if fsync:
        fsync_dir(parent)


READ_SIZE = 1 << 16


def read_if_present(path: Path | str) -> bytes | None:
    """A small file's bytes, None when it is absent or not a file: three plain os calls, where
    Path.is_file() and read_text() take ten (thousands of trials read their reward at once)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None
    try:
        chunks = []
        while chunk := os.read(fd, READ_SIZE):
            chunks.append(chunk)
            if len(chunk) < READ_SIZE:  # a regular file reads short only at its end: no read just to see that
                break
    except IsADirectoryError:
        return None
    finally:
        os.close(fd)
    return b"".join(chunks)


def write_json(path: Path, data: Any) -> None:
    """Durable: run.json, summary.json and sweep.json are rewritten rarely and must survive a crash."""
    write_atomic(path, json.dumps(data, indent=2, sort_keys=False, default=str) + "\n", fsync=True)


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
        self.appender = DurableAppender(self.trials_path)
        self._tasks = os.path.join(run_dir, "tasks")  # strings: pathlib costs more than the file calls
        self._lock = threading.Lock()
        self._recorded: dict[tuple[str, int], TrialResult] | None = None  # trials.jsonl as this process knows it

    def finished(self, warn: bool = False) -> dict[tuple[str, int], TrialResult]:
        """What trials.jsonl records; `warn` prints one line per line that is not a trial."""
        results, problems = read_trials(self.trials_path)
        if warn:
            for problem in problems:
                print(f"warning: {problem}", file=sys.stderr, flush=True)
        with self._lock:
            self._recorded = dict(results)
        return results

    def recorded(self) -> list[TrialResult]:
        """What trials.jsonl holds, without reading it again: what finished() read plus every record()
        since (the run lock keeps other writers out). Summaries of a run of thousands are made from it."""
        if self._recorded is None:
            self.finished()
        with self._lock:
            return list(self._recorded.values())  # type: ignore[union-attr]

    def repair(self) -> None:
        """Called once, under the run lock, before the first append of a session."""
        action = repair_tail(self.trials_path)
        if action:
            print(f"warning: {action}", file=sys.stderr, flush=True)

    def trial_dir(self, task_id: str, attempt: int) -> Path:
        return self.dir / "tasks" / task_id / f"attempt-{attempt}"

    def fresh_trial_dir(self, task_id: str, attempt: int) -> Path:
        """An empty dir for an attempt: leftovers of an unfinished earlier session are removed."""
        task_dir = os.path.join(self._tasks, task_id)
        path = os.path.join(task_dir, f"attempt-{attempt}")
        try:
            os.mkdir(task_dir)
        except FileExistsError:  # another attempt of the task made it
            pass
        except FileNotFoundError:  # the first trial of the run: tasks/ too
            os.makedirs(task_dir, exist_ok=True)
        try:
            os.mkdir(path)
        except FileExistsError:  # rare (a resumed run): only then pay for a removal
            shutil.rmtree(path)
            os.mkdir(path)
        return Path(path)

    def keep_failed_try(self, trial_dir: Path, number: int) -> None:
        """Move a failed try's files into `try-<number>/` of its attempt, out of the next try's way."""
        keep = trial_dir / f"try-{number}"
        keep.mkdir()
        for entry in os.listdir(trial_dir):
            if not entry.startswith("try-"):
                os.rename(trial_dir / entry, keep / entry)

    def record(self, result: TrialResult) -> None:
        """Append the result's line; returns once it is durable (fsynced), so a trial reported
        finished survives a SIGKILL. Then result.json, the same line, written plainly."""
        line = result.model_dump_json().encode("utf-8") + b"\n"
        self.commit([(result, line)])
        self.write_result_json(result.task_id, result.attempt, line)

    def commit(self, entries: list[tuple[TrialResult, bytes]]) -> None:
        """Append the lines of these results at once; returns once they are durable. Worker processes'
        trials (agentcompass.shards) arrive here in batches: one write, one fsync for the lot."""
        self.appender.append(b"".join(line for _, line in entries))
        with self._lock:
            if self._recorded is not None:
                for result, _ in entries:
                    self._recorded[(result.task_id, result.attempt)] = result

    def write_result_json(self, task_id: str, attempt: int, line: bytes) -> None:
        path = os.path.join(self._tasks, task_id, f"attempt-{attempt}", "result.json")
        try:
            write_file(path, line)
        except FileNotFoundError:
            pass  # the trial failed before it got its dir
        except OSError as exc:  # the trial is recorded all the same: say so, don't fail the run
            log.warning("cannot write result.json", path=path, error=str(exc))


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
    """The summary fields, computed as the README's "Summary fields" defines them. One pass over the
    trials: it runs at every checkpoint of a run of thousands."""
    tally = {t: [0, 0, 0] for t in task_ids}  # per task: trials, graded attempts, passed attempts
    trials: list[TrialResult] = []
    failed = 0
    errors_by_category: dict[str, int] = {}
    for r in results:
        counts = tally.get(r.task_id)
        if counts is None or not 1 <= r.attempt <= k:
            continue
        trials.append(r)
        counts[0] += 1
        if r.status == "error":
            key = r.error_category or "infra"
            errors_by_category[key] = errors_by_category.get(key, 0) + 1
            # Graded attempts: passed or failed; an error is no verdict on the agent unless the user says so.
            counts[1] += count_errors_as_failures
        else:
            counts[1] += 1
            counts[2] += r.status == "passed"
            failed += r.status == "failed"
    usage = Usage.total(r.usage for r in trials)

    def pass_at(kk: int) -> tuple[float | None, int]:
        """Mean of the unbiased estimator over the tasks with at least kk graded attempts."""
        scored = [pass_at_k(graded, passed, kk) for _, graded, passed in tally.values() if graded >= kk]
        return (round(sum(scored) / len(scored), 6) if scored else None), len(scored)

    pass_1, pass_1_tasks = pass_at(1)
    pass_k, pass_k_tasks = pass_at(k)
    attempted = sum(count > 0 for count, _, _ in tally.values())
    solved = sum(passed > 0 for _, _, passed in tally.values())
    passed_trials = sum(passed for _, _, passed in tally.values())
    errors = sum(errors_by_category.values())
    return {
        "tasks": len(task_ids),
        "tasks_attempted": attempted,
        "tasks_unattempted": len(task_ids) - attempted,
        "k": k,
        "trials_expected": len(task_ids) * k,
        "trials": len(trials),
        "passed": passed_trials,
        "failed": failed,
        "errors": errors,
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
        **cli_cost(usage),
        "model_calls": usage.model_calls,
        "tokens_in": usage.tokens_in,
        "tokens_out": usage.tokens_out,
        "tokens_cached": usage.tokens_cached,
        "tokens_cache_write": usage.tokens_cache_write,
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


def cli_cost(usage: Usage) -> dict[str, Any]:
    """An installed CLI's own cost figure beside the priced one, and how far apart they are (only when it gave one)."""
    if usage.cli_cost_usd is None:
        return {}
    return {"cli_cost_usd": round(usage.cli_cost_usd, 6), "cli_cost_difference_usd": round(usage.cli_cost_usd - usage.cost_usd, 6)}
