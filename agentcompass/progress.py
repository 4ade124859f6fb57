"""Progress display: a rich bar on a terminal, one plain line per trial otherwise."""

from __future__ import annotations

import sys
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentcompass.results import TrialResult


class Progress:
    def __init__(self, total: int, done: int = 0, passed: int = 0, errors: int = 0, title: str = "") -> None:
        self.total, self.done, self.passed, self.errors = total, done, passed, errors
        self.title = title
        self.t0 = time.monotonic()
        self._lock = threading.Lock()
        self._bar: Any = None
        self._task_id: Any = None
        if sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
            from rich.progress import Progress as RichProgress

            self._bar = RichProgress(
                TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("passed {task.fields[passed]}  errors {task.fields[errors]}  "
                           "waiting for a sandbox {task.fields[waiting]}"),
                TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                console=Console(stderr=True), transient=False,
            )
            self._task_id = self._bar.add_task(title or "trials", total=total, completed=done, passed=passed, errors=errors,
                                                waiting=0)

    def __enter__(self) -> "Progress":
        if self._bar is not None:
            self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()

    def waiting(self, count: int) -> None:
        """How many trials wait for a sandbox slot or a creation token (pacing)."""
        if self._bar is not None:
            self._bar.update(self._task_id, waiting=count)

    def finished(self, result: "TrialResult") -> None:
        with self._lock:
            self.done += 1
            self.passed += result.status == "passed"
            self.errors += result.status == "error"
            if self._bar is not None:
                self._bar.update(self._task_id, completed=self.done, passed=self.passed, errors=self.errors)
                return
            status = result.status if result.status != "error" else f"error ({result.error_category})"
            seconds = result.timings.get("total", 0.0)
            print(
                f"[{self.done}/{self.total}] {result.task_id} attempt {result.attempt}: {status} ({seconds:.1f}s)",
                file=sys.stderr, flush=True,
            )
