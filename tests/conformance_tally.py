"""The conformance suite's tally: comparisons per anchor ("swebench 4.1.0: 212 of 212 verdicts identical").

A module of its own so the top conftest can print it: under pytest-xdist the controller never collects
tests/conformance (its conftest stays unloaded there), so each worker hands its counts to the controller,
which adds them up and prints the table at the end of the run."""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path
from typing import Any


class Tally:
    """Comparisons per anchor and what they compared ("verdicts", "predictions files", ...)."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])

    def record(self, anchor: str, what: str, identical: int, total: int) -> None:
        count = self.counts[(anchor, what)]
        count[0] += identical
        count[1] += total

    def rows(self) -> list[list[Any]]:
        """The counts as plain lists: what a worker sends to the controller."""
        return [[anchor, what, same, total] for (anchor, what), (same, total) in self.counts.items()]

    def merge(self, rows: list[list[Any]]) -> None:
        for anchor, what, identical, total in rows:
            self.record(anchor, what, identical, total)

    def lines(self) -> list[str]:
        return [f"{anchor}: {same} of {total} {what} identical"
                for (anchor, what), (same, total) in sorted(self.counts.items())]

    def table(self) -> str:
        rows = [f"| {anchor} | {what} | {same} | {total} |" for (anchor, what), (same, total) in sorted(self.counts.items())]
        return "\n".join(["| anchor | compared | identical | total |", "|---|---|---|---|", *rows]) + "\n"


TALLY = Tally()
WORKER_KEY = "conformance_tally"


def summarize(terminalreporter: Any) -> None:
    """The tally at the end of the run; with AGENTCOMPASS_CONFORMANCE_TABLE=FILE also as a table there."""
    if not TALLY.counts:
        return
    terminalreporter.section("conformance")
    for line in TALLY.lines():
        terminalreporter.write_line(line)
    target = os.environ.get("AGENTCOMPASS_CONFORMANCE_TABLE")
    if target:
        Path(target).write_text(TALLY.table())
