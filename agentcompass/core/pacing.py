"""Pacing sandbox creation: at most N sandboxes of the env open at once, and at most Q creations a second.

Cloud accounts cap how fast sandboxes may be created (Modal answers ResourceExhaustedError past a few a
second) and how many may run. A trial takes its turn before it opens its sandbox and gives the slot back
once the sandbox is closed; the wait is the trial's `wait` timing, never part of its own time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from agentcompass.core.errors import InfraError

POLL_S = 0.2  # how often a waiting trial checks whether the run is being interrupted


class Pacer:
    def __init__(self, limit: int | None = None, qps: float | None = None,
                 on_waiting: Callable[[int], None] | None = None) -> None:
        self.limit, self.qps = limit, qps
        self.on_lowered: Callable[[int, str], None] | None = None  # progress: the limit went down, and why
        self.burst = max(1.0, qps or 0.0)  # a full bucket lets this many creations go at once
        self.on_waiting = on_waiting
        self._cond = threading.Condition()
        self._open = 0
        self._waiting = 0
        self._tokens = self.burst
        self._refilled = time.monotonic()

    @contextmanager
    def turn(self, abort: Callable[[], bool] = lambda: False) -> Iterator[float]:
        """Wait for a slot and a token (polling `abort`, which ends the wait with InfraError); yields
        the seconds waited and holds the slot until the block ends."""
        start = time.monotonic()
        if self.limit is None and self.qps is None:  # unpaced: only counted, so that back-pressure knows how many
            with self._cond:
                self._open += 1
            try:
                yield 0.0
            finally:
                with self._cond:
                    self._open -= 1
                    self._cond.notify_all()
            return
        self._set_waiting(+1)
        try:
            with self._cond:
                while True:
                    if abort():
                        raise InfraError("interrupted")
                    delay = self._delay()
                    if delay == 0.0:
                        break
                    self._cond.wait(min(delay, POLL_S))
                self._open += 1
                if self.qps is not None:
                    self._tokens -= 1
        finally:
            self._set_waiting(-1)
        try:
            yield time.monotonic() - start
        finally:
            with self._cond:
                self._open -= 1
                self._cond.notify_all()

    def lower(self, reason: str) -> int:
        """Back-pressure (a quota or rate limit the provider met on opening; call it after giving the slot back):
        from now on at most as many open at once as are open now, never fewer than one. Returns the limit."""
        with self._cond:
            lowered = max(1, self._open)
            changed = self.limit is None or lowered < self.limit
            if changed:
                self.limit = lowered
            limit = self.limit
        if changed and self.on_lowered is not None:
            self.on_lowered(limit, reason)
        return limit

    def _delay(self) -> float:
        """0 when a trial may open now, else how long to wait at most before looking again (lock held)."""
        if self.limit is not None and self._open >= self.limit:
            return POLL_S  # until a slot is given back (notify) or the poll comes round
        if self.qps is None:
            return 0.0
        now = time.monotonic()
        self._tokens = min(self.burst, self._tokens + (now - self._refilled) * self.qps)
        self._refilled = now
        return 0.0 if self._tokens >= 1 else (1 - self._tokens) / self.qps

    def _set_waiting(self, change: int) -> None:
        with self._cond:
            self._waiting += change
            waiting = self._waiting
        if self.on_waiting is not None:
            self.on_waiting(waiting)
