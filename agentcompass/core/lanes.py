"""What a schedule is made of: lanes (one run's pending attempts, where their results go, how they are
retried), their round-robin order, and the scheduler as its worker processes see it.

Its own module, below both the scheduler and the worker processes (agentcompass.core.shards): both
handle lanes, and the worker processes drive the scheduler they were forked from through `Schedule`
without importing it (the scheduler imports them to fork them)."""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from agentcompass.core.errors import TrialError
from agentcompass.core.progress import Progress
from agentcompass.core.results import ResultsStore, TrialResult
from agentcompass.core.task import Task
from agentcompass.core.trial import TrialRunner


@dataclass
class RetryPolicy:
    max_retries: int
    backoff_s: float  # the first retry waits about this long, each later one about twice the one before
    max_backoff_s: float = 60.0

    def delay(self, retry: int) -> float:
        """Exponential, capped, with equal jitter: half the step fixed, half random, so trials
        that failed together (an outage) do not all retry in the same instant."""
        step = min(self.max_backoff_s, self.backoff_s * 2 ** (retry - 1))
        return step / 2 + random.uniform(0, step / 2)


@dataclass
class Lane:
    """One run's part of a schedule: its pending attempts, where their results go, how they are retried."""

    runner: TrialRunner
    store: ResultsStore
    retry: RetryPolicy
    pending: list[tuple[Task, int]]
    label: str = ""  # tells the runs of a pooled sweep apart in progress lines
    closed: threading.Event = field(default_factory=threading.Event)  # nothing more of this run is started
    failures: list[str] = field(default_factory=list)  # a worker failed outside a trial: the run ends "failed"
    fatal: TrialError | None = None  # an error no retry or other task gets past (FatalInfraError): the run stops


def interleave(lanes: list[Lane]) -> list[tuple[Lane, Task, int]]:
    """Round-robin over the lanes: the first pending attempt of each, then the second of each, ..."""
    longest = max((len(lane.pending) for lane in lanes), default=0)
    return [(lane, *lane.pending[i]) for i in range(longest) for lane in lanes if i < len(lane.pending)]


class Schedule(Protocol):
    """The scheduler (agentcompass.core.scheduler.Scheduler) as the worker processes use it: the parent
    records and prints for them, so a worker rewires where results, progress and lane stops go, then
    supervises its share of the trial threads."""

    lanes: list[Lane]
    stopping: threading.Event  # interrupted: nothing more is started or recorded
    progress: Progress
    report: Callable[[Lane, TrialResult], None]
    lane_stopped: Callable[[Lane, str, Any], None]

    def supervise(self, queue: Any, threads: int) -> int: ...
