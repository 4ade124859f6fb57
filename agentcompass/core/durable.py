"""Durable appends: every byte written, fsynced, and concurrent appenders sharing one fsync."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from agentcompass.core.secret_values import scrub_bytes


def fsync_dir(path: Path | str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    """os.write until every byte is written: a short write (a full disk, a signal) continues
    where it stopped, and a write that makes no progress raises. Every secret value the process knows is
    scrubbed first (agentcompass.core.secret_values): this is where results files reach the disk."""
    view = memoryview(scrub_bytes(data))
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(f"write made no progress ({len(view)} bytes left)")
        view = view[written:]


CREATE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC


def write_file(path: str, data: bytes, *, make_dir: bool = False, fsync: bool = False) -> None:
    """Create or replace the file at `path` with `data`, in plain os calls (thousands of trials write
    several files each); `make_dir` makes its missing dir, `fsync` makes the bytes durable before close."""
    try:
        fd = os.open(path, CREATE, 0o644)
    except FileNotFoundError:
        if not make_dir:
            raise
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, CREATE, 0o644)
    try:
        write_all(fd, data)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


class DurableAppender:
    """Appends lines to a file, each `append` returning only once its line is on disk.

    Group commit: the appender that finds no write in progress leads: it writes every line
    queued so far with one write and one fsync. Appenders arriving meanwhile queue their lines
    and wait; when the batch is durable the leader wakes its appenders and hands the lead to the
    first line queued since. Concurrent trials thus share fsyncs, no waiter wakes for another's
    batch, and a line is reported durable only after its fsync. A failed batch raises in each
    of its appenders, after cutting the file back to where the batch began (no torn line stays).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._queue: list[_Line] = []
        self._busy = False

    def append(self, data: bytes) -> None:
        line = _Line(data)
        with self._lock:
            self._queue.append(line)
            follow, self._busy = self._busy, True
        if follow:
            line.event.wait()
            if line.done:
                return line.result()
            # not done: the previous leader handed the lead to this line
        self._lead()
        return line.result()

    def _lead(self) -> None:
        with self._lock:
            batch, self._queue = self._queue, []
        error: OSError | None = None
        try:
            self._write(b"".join(item.data for item in batch))
        except OSError as exc:
            error = exc
        with self._lock:
            for item in batch:
                item.done, item.error = True, error
            successor = self._queue[0] if self._queue else None
            self._busy = successor is not None
        for item in batch:
            item.event.set()
        if successor is not None:
            successor.event.set()

    def _write(self, data: bytes) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            start = os.fstat(fd).st_size
            try:
                write_all(fd, data)
                os.fsync(fd)
            except OSError:
                try:
                    os.ftruncate(fd, start)
                except OSError:
                    pass  # the reader repairs a torn tail
                raise
        finally:
            os.close(fd)


class _Line:
    __slots__ = ("data", "done", "error", "event")

    def __init__(self, data: bytes) -> None:
        self.data, self.done, self.error, self.event = data, False, None, threading.Event()

    def result(self) -> None:
        if self.error is not None:
            raise OSError(self.error.errno, f"cannot append to trials.jsonl: {self.error.strerror or self.error}")
