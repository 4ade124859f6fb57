"""Closed workspaces are deleted on a background thread, off the trials' critical path."""

from __future__ import annotations

import atexit
import os
import queue
import shutil
import threading
from pathlib import Path

import structlog

log = structlog.get_logger("agentcompass")


class WorkspaceRemover:
    """Deletes closed workspaces on a background thread, off the trials' critical path.

    Removing a directory tree costs more than everything else a tiny trial does; the
    sandbox is already dead when its workspace is queued here, and the queue is drained
    before the process exits, so nothing is left behind.
    """

    def __init__(self) -> None:
        self._queue: queue.Queue[Path] = queue.Queue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def remove(self, path: Path) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="workspace-remover", daemon=True)
                self._thread.start()
                atexit.register(self.drain)
        self._queue.put(path)

    def _loop(self) -> None:
        while True:
            path = self._queue.get()
            try:
                self._remove(path)
            finally:
                self._queue.task_done()

    @staticmethod
    def _remove(path: Path) -> None:
        failures: list[tuple[str, BaseException]] = []

        def record(function: object, failed: str, exc_info: tuple) -> None:
            if not isinstance(exc_info[1], FileNotFoundError):  # already gone (a second close) is the goal
                failures.append((failed, exc_info[1]))

        shutil.rmtree(path, onerror=record)
        if failures:
            failed, error = failures[0]
            log.warning("cannot remove a closed workspace; delete it by hand", path=str(path), failed=failed,
                        error=str(error), failures=len(failures))

    def drain(self) -> None:
        self._queue.join()


REMOVER = WorkspaceRemover()
os.register_at_fork(after_in_child=REMOVER.__init__)  # a worker process (agentcompass.core.shards) starts its own thread
