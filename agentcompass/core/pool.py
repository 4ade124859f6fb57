"""Pooled sweeps (`--sweep-parallel`): every job of a sweep in one scheduler under one --task-concurrency.

Hydra's launcher calls our task function once per job, one after the other. In a pooled
sweep the task function does not run its job: it opens the job's run (its lock, run.json,
pending trials) and adds it here; once Hydra has visited every job, the pool runs all their
trials at once, interleaved round-robin. Each job keeps its own results directory, lock,
fingerprint, log.jsonl and summary, so an interrupted pool resumes as its jobs would alone.
"""

from __future__ import annotations

from contextlib import ExitStack

from agentcompass.core.prepare import PreparedRun
from agentcompass.core.runner import schedule
from agentcompass.core.session import OpenRun, opened
from agentcompass.core.signals import Interrupted
from agentcompass.core.pacing import Pacer


class Pool:
    def __init__(self, argv: list[str], concurrency: int) -> None:
        self.argv = argv
        self.concurrency = concurrency
        self.runs: list[OpenRun] = []
        self._sessions = ExitStack()
        self._pacers: dict[object, Pacer] = {}  # one per env: the jobs share its open-slot limit and creation rate

    def add(self, prepared: PreparedRun) -> None:
        """Open the job's run and queue its pending trials (UserError: another process holds the run)."""
        label = prepared.resolved.labels.get("suffix") or prepared.run_dir.name
        self.runs.append(self._sessions.enter_context(opened(prepared, self.argv, self._pacers, label)))

    def run(self) -> None:
        """Every run's trials in one schedule; each run is closed (status, summary) however it ends.
        Raises Interrupted on Ctrl-C, after marking every run interrupted."""
        with self._sessions:
            if self.runs:
                run_name = self.runs[0].prepared.run_dir.parent.name
                schedule(self.runs, self.concurrency, f"{run_name} · {len(self.runs)} runs pooled",
                         self.runs[0].prepared.resolved.run.processes)

    def abandon(self) -> None:
        """Interrupted before the pool ran: close the runs opened so far as interrupted."""
        self._sessions.__exit__(Interrupted, Interrupted(), None)
