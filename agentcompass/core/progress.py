"""Progress display: a rich bar on a terminal, one plain line per trial otherwise.

Progress is a courtesy: when its stream breaks (`| head -1`, a closed terminal), printing
stops and the run goes on; trials.jsonl and the summary are the record.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from agentcompass.core.results import TrialResult

REASON_CHARS = 100


def first_line(message: str, limit: int = REASON_CHARS) -> str:
    """The first non-empty line of a message, cut to `limit` characters: a reason that fits a progress line."""
    line = next((part.strip() for part in message.splitlines() if part.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def silence(stream: TextIO) -> None:
    """Point a broken stream's descriptor at /dev/null, so later writes (and the flush at exit) succeed quietly."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


WAIT_NOTICE_S = 1.0  # a wait longer than this says what it is waiting for


class Waiting:
    """`with Waiting("the model endpoint to answer"):` around a wait that may last: after WAIT_NOTICE_S one
    line on stderr says what the command is waiting for. Only where a person watches (stderr a terminal): a
    script reading stderr gets a refusal as its one line, with nothing before it."""

    def __init__(self, what: str, after_s: float = WAIT_NOTICE_S, stream: TextIO | None = None) -> None:
        self.what, self.stream = what, stream if stream is not None else sys.stderr
        self.timer = threading.Timer(after_s, self._say)
        self.timer.daemon = True

    def _say(self) -> None:
        write_line(self.stream, f"waiting for {self.what}...")

    def __enter__(self) -> "Waiting":
        try:
            watched = self.stream.isatty()
        except (AttributeError, ValueError):  # a closed or odd stream: nobody watches it
            watched = False
        if watched:
            self.timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.timer.cancel()


def run_prefix(label: str) -> str:
    return f"{label}: " if label else ""


def write_line(stream: TextIO, text: str) -> None:
    stream.write(text + "\n")
    stream.flush()


class Progress:
    def __init__(self, total: int, done: int = 0, passed: int = 0, errors: int = 0, title: str = "") -> None:
        self.total, self.done, self.passed, self.errors = total, done, passed, errors
        self.title = title
        self.t0 = time.monotonic()
        self._lock = threading.Lock()
        self._bar: Any = None
        self._task_id: Any = None
        self._broken = False
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
            self._guarded(self._bar.start)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._guarded(self._bar.stop)

    def waiting(self, count: int) -> None:
        """How many trials wait for a sandbox slot or a creation token (pacing)."""
        if self._bar is not None:
            self._guarded(lambda: self._bar.update(self._task_id, waiting=count))

    def finished(self, result: "TrialResult", label: str = "") -> None:
        """One more trial recorded; `label` names its run in a pooled sweep."""
        with self._lock:
            self.done += 1
            self.passed += result.status == "passed"
            self.errors += result.status == "error"
            if self._bar is not None:
                self._guarded(lambda: self._bar.update(self._task_id, completed=self.done, passed=self.passed,
                                                       errors=self.errors))
                if result.status != "error":  # the bar counts the rest; errors get a line above it
                    return
            status = result.status if result.status != "error" else f"error ({result.error_category})"
            reason = first_line(result.message) if result.status != "passed" else ""
            seconds = result.timings.get("total", 0.0)
            self._line(f"[{self.done}/{self.total}] {run_prefix(label)}{result.task_id} attempt {result.attempt}: {status} "
                       f"({seconds:.1f}s)" + (f": {reason}" if reason else ""))

    def lowered(self, limit: int, reason: str, label: str = "") -> None:
        """The env met a quota or rate limit (back-pressure): it opens at most `limit` sandboxes at once now."""
        with self._lock:
            self._line(f"[{self.done}/{self.total}] {run_prefix(label)}back-pressure: at most {limit} sandbox(es) open at "
                       f"once from now on; waiting trials retry with backoff: {first_line(reason, 200)}")

    def retrying(self, task_id: str, attempt: int, retry: int, max_retries: int, delay: float, reason: str,
                 label: str = "") -> None:
        with self._lock:
            self._line(f"[{self.done}/{self.total}] {run_prefix(label)}{task_id} attempt {attempt}: infra error, "
                       f"retry {retry}/{max_retries} in {delay:.1f}s: {first_line(reason)}")

    def _line(self, text: str) -> None:
        if self._bar is not None:
            self._guarded(lambda: self._bar.console.print(text, markup=False, highlight=False))
        else:
            self._guarded(lambda: write_line(sys.stderr, text))

    def _guarded(self, write: Any) -> None:
        if self._broken:
            return
        try:
            write()
        except OSError:  # EPIPE, EIO: nobody reads the progress any more; the run goes on without it
            self._broken = True
            silence(sys.stderr)
