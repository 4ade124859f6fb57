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
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import structlog
from pydantic import BaseModel, Field, ValidationError

from agentcompass.core.calls import CALLS_FILE, usage_of_calls
from agentcompass.core.durable import DurableAppender, fsync_dir, write_file
from agentcompass.core.task import Usage

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


def iso(timestamp: float) -> str:
    """A time.time() as now_iso() would have written it then."""
    return datetime.fromtimestamp(timestamp, timezone.utc).isoformat(timespec="milliseconds")


_PID = os.getpid()
_SERIAL = itertools.count()  # next() is atomic under the GIL: each write gets its own temp name


def _forked() -> None:
    global _PID
    _PID = os.getpid()  # a worker process (agentcompass.core.shards) writes temp files beside its parent's


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


def read_trials(path: Path, superseded: list[TrialResult] | None = None) -> tuple[dict[tuple[str, int], TrialResult], list[str]]:
    """The trials of a trials.jsonl, the last line per (task, attempt) winning (a retried error
    supersedes its first record), and one message per line that is not a trial (skipped).

    An unterminated last line is a write still in flight (or cut by a kill): skipped silently. `superseded`
    gets the records a later line replaced (what they spent still counts in the totals)."""
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
        key = (result.task_id, result.attempt)
        if superseded is not None and key in results:
            superseded.append(results[key])
        results[key] = result
    return results, problems


def unfinished_tail(path: Path) -> str | None:
    """For readers that leave the file alone (`report`): the warning `run` gives when trials.jsonl ends in
    a line without its newline (a kill or a full disk mid-write), or None. That line is not read."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if not data or data.endswith(b"\n"):
        return None
    fragment = data[data.rfind(b"\n") + 1:]
    return (f"{path}: an unfinished last line ({len(fragment)} bytes) is left out; that attempt runs again "
            f"when the run is resumed")


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


ABANDONED_DIR = "abandoned"  # tries cut short (an interrupt, a kill) or superseded (retry_errors), kept for what they spent
SUPERSEDED_MARK = ".superseded-"  # in the name of a recorded try's folder there: a retry replaced its record


@dataclass
class AbandonedTry:
    """A try that reached the model but has no record in trials.jsonl: its spend counts in every total."""

    task_id: str
    attempt: int
    name: str  # its folder under abandoned/<task_id>/
    dir: Path
    usage: Usage
    calls: list[dict[str, Any]]  # every model_calls.jsonl under it (failed tries' too), for the cost split
    superseded: bool = False  # a recorded try that --retry-errors replaced: its spend is its record's (trials.jsonl)


def read_abandoned_try(path: Path, task_id: str) -> AbandonedTry:
    calls: list[dict[str, Any]] = []
    for folder, _, files in sorted(os.walk(path)):
        if CALLS_FILE in files:
            calls += read_jsonl(Path(folder, CALLS_FILE))
    usage = usage_of_calls(calls)
    attempt = path.name.partition(".")[0].removeprefix("attempt-")
    return AbandonedTry(task_id, int(attempt) if attempt.isdigit() else 0, path.name, path, usage, calls,
                        SUPERSEDED_MARK in path.name)


def read_abandoned(run_dir: Path, known: dict[str, AbandonedTry] | None = None) -> list[AbandonedTry]:
    """Every abandoned try of a run, by abandoned/<task_id>/<name>; those in `known` are not read again."""
    root = os.path.join(run_dir, ABANDONED_DIR)
    found: list[AbandonedTry] = []
    try:
        tasks = sorted(os.listdir(root))
    except FileNotFoundError:  # the common case: nothing was ever cut short
        return found
    for task_id in tasks:
        for name in sorted(os.listdir(os.path.join(root, task_id))):
            key = f"{task_id}/{name}"
            item = (known or {}).get(key) or read_abandoned_try(Path(root, task_id, name), task_id)
            if known is not None:
                known[key] = item
            found.append(item)
    return found


def has_calls(path: str) -> bool:
    return any(CALLS_FILE in files for _, _, files in os.walk(path))


class ResultsStore:
    def __init__(self, run_dir: Path) -> None:
        self.dir = run_dir
        self.trials_path = run_dir / "trials.jsonl"
        self.appender = DurableAppender(self.trials_path)
        self._tasks = os.path.join(run_dir, "tasks")  # strings: pathlib costs more than the file calls
        self._lock = threading.Lock()
        self._recorded: dict[tuple[str, int], TrialResult] | None = None  # trials.jsonl as this process knows it
        self._abandoned: dict[str, AbandonedTry] = {}  # abandoned/ as read so far
        self.superseded: list[TrialResult] = []  # records a retry replaced (--retry-errors): spend in the totals

    def finished(self, warn: bool = False) -> dict[tuple[str, int], TrialResult]:
        """What trials.jsonl records; `warn` prints one line per line that is not a trial."""
        superseded: list[TrialResult] = []
        results, problems = read_trials(self.trials_path, superseded)
        if warn:
            for problem in problems:
                print(f"warning: {problem}", file=sys.stderr, flush=True)
        with self._lock:
            self._recorded = dict(results)
            self.superseded = superseded
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
        except FileExistsError:  # rare (a resumed run): what the try there spent is kept, its files moved aside
            self.set_aside(path, task_id, attempt)
            os.mkdir(path)
        return Path(path)

    def set_aside(self, trial_dir: Path | str, task_id: str, attempt: int, recorded: bool | None = None) -> None:
        """Move the files of a try that has or will have no record (cut short by an interrupt or a kill, or
        recorded and now retried by --retry-errors) to abandoned/<task_id>/, where their model calls count in the
        run's totals; a try that never reached the model is just removed. `recorded` None: a recorded try is told
        by its result.json; False: the caller knows the try has no record."""
        trial_dir = os.fspath(trial_dir)
        if not os.path.isdir(trial_dir):
            return
        if recorded is None:
            with self._lock:
                known = self._recorded is not None and (task_id, attempt) in self._recorded
            recorded = known and os.path.exists(os.path.join(trial_dir, "result.json"))
        if not has_calls(trial_dir):
            shutil.rmtree(trial_dir)
            return
        mark = SUPERSEDED_MARK[1:] if recorded else ""
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        target = os.path.join(self.dir, ABANDONED_DIR, task_id, f"attempt-{attempt}.{mark}{stamp}-{_PID}-{next(_SERIAL)}")
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.rename(trial_dir, target)

    def abandoned(self) -> list[AbandonedTry]:
        """The run's abandoned tries (a few, if any: listed at each summary, read once each)."""
        return read_abandoned(self.dir, self._abandoned)

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
        trials (agentcompass.core.shards) arrive here in batches: one write, one fsync for the lot."""
        self.appender.append(b"".join(line for _, line in entries))
        with self._lock:
            if self._recorded is not None:
                for result, _ in entries:
                    key = (result.task_id, result.attempt)
                    if key in self._recorded:
                        self.superseded.append(self._recorded[key])
                    self._recorded[key] = result

    def write_result_json(self, task_id: str, attempt: int, line: bytes) -> None:
        path = os.path.join(self._tasks, task_id, f"attempt-{attempt}", "result.json")
        try:
            write_file(path, line)
        except FileNotFoundError:
            pass  # the trial failed before it got its dir
        except OSError as exc:  # the trial is recorded all the same: say so, don't fail the run
            log.warning("cannot write result.json", path=path, error=str(exc))


def active_seconds(sessions: list[dict[str, Any]]) -> float:
    """Sum of each session's span (start to its last recorded end, or now while it runs):
    the gaps between a kill and a resume are not run time."""
    total = 0.0
    for session in sessions:
        start = datetime.fromisoformat(session["started_at"])
        end = datetime.fromisoformat(session["ended_at"]) if session.get("ended_at") else datetime.now(timezone.utc)
        total += max(0.0, (end - start).total_seconds())
    return total

