"""One process per run directory: an exclusive flock on `<run_dir>/.lock`, which holds the pid.

The kernel releases a flock when its holder exits, however it dies, so a killed run never
blocks the resume that follows it; the file itself stays behind, harmless.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from agentcompass.core.errors import UserError


class RunLock:
    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / ".lock"
        self._fd: int | None = None

    def __enter__(self) -> "RunLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited by sandbox processes
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = read_holder(fd)
            os.close(fd)
            raise UserError(in_use_message(self.path.parent, holder)) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            os.close(self._fd)  # releases the lock
            self._fd = None


def in_use_message(run_dir: Path, holder: str) -> str:
    return f"run directory {run_dir} is in use by process {holder}; wait for it to end, stop it, or pass another --run-name"


def read_holder(fd: int) -> str:
    """The holder's pid; it writes it just after locking, so an empty file gets a moment's grace."""
    for _ in range(20):
        text = os.pread(fd, 32, 0).decode(errors="replace").strip()
        if text:
            return text
        time.sleep(0.01)
    return "unknown"


def holder_of(run_dir: Path) -> str | None:
    """The pid of the process running in run_dir now, or None when none holds its lock (for readers
    such as `report`, which never take it)."""
    try:
        fd = os.open(run_dir / ".lock", os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return read_holder(fd)
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
