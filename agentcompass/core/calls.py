"""model_calls.jsonl: one line per model call of a trial, for the cost report's concurrency split.

Each line: `start`, `end` (UTC epoch seconds), `duration_s`, `status` (ok | error), `tokens_in`,
`tokens_out`, `tokens_cached` (cache reads), `tokens_cache_write` (Anthropic's cache_creation_input_tokens;
reads and writes are part of tokens_in) and `cost_usd` (null when the call failed before a reply). A
line is written whole by one write, so a kill loses at most the call in flight.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

if TYPE_CHECKING:
    from agentcompass.core.task import Usage

CALLS_FILE = "model_calls.jsonl"
log = structlog.get_logger("agentcompass")


class CallLog:
    """Called by the Meter: `ended` when a request returns or fails, `priced` when its reply is counted."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._pending: dict[str, Any] | None = None  # a reply waiting for its token counts

    def ended(self, seconds: float, failed: bool) -> None:
        self._flush()
        end = time.time()
        call = {"start": round(end - seconds, 6), "end": round(end, 6), "duration_s": round(seconds, 6)}
        if failed:
            self._write({**call, "status": "error", "tokens_in": 0, "tokens_out": 0, "tokens_cached": 0,
                         "tokens_cache_write": 0, "cost_usd": None})
        else:
            self._pending = call

    def priced(self, tokens_in: int, tokens_out: int, cached: int, cost_usd: float | None, cache_write: int = 0) -> None:
        if self._pending is None:
            return
        call, self._pending = self._pending, None
        self._write({**call, "status": "ok", "tokens_in": tokens_in, "tokens_out": tokens_out,
                     "tokens_cached": cached, "tokens_cache_write": cache_write, "cost_usd": cost_usd})

    def _flush(self) -> None:
        """A reply that was never priced still happened: recorded with unknown tokens."""
        if self._pending is not None:
            call, self._pending = self._pending, None
            self._write({**call, "status": "ok", "tokens_in": None, "tokens_out": None, "tokens_cached": None,
                         "tokens_cache_write": None, "cost_usd": None})

    def _write(self, row: dict[str, Any]) -> None:
        line = (json.dumps(row) + "\n").encode("utf-8")
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except FileNotFoundError:
            if self.path.parent.is_dir():
                raise
            # The try's folder is gone: an interrupt set it aside before this call (one the gateway was still
            # relaying when its trial ended, past the release's wait) came to an end.
            log.warning("a model call ended after its try's folder was moved; it is not recorded",
                        folder=str(self.path.parent), status=row["status"])
            return
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


def usage_of_calls(calls: list[dict[str, Any]]) -> "Usage":
    """What these call records add up to: answered calls and their tokens and cost (unknown where one has
    none), every call's waiting time, and the failed ones as model_errors."""
    from agentcompass.core.task import Usage

    answered = [c for c in calls if c.get("status") == "ok"]
    return Usage(
        model_calls=len(answered),
        tokens_in=sum(c.get("tokens_in") or 0 for c in answered),
        tokens_out=sum(c.get("tokens_out") or 0 for c in answered),
        tokens_cached=sum(c.get("tokens_cached") or 0 for c in answered),
        cost_usd=sum(c.get("cost_usd") or 0.0 for c in answered),
        cost_known=all(c.get("cost_usd") is not None for c in answered),
        generation_s=sum(float(c.get("duration_s") or 0.0) for c in calls),
        model_errors=len(calls) - len(answered),
    )
