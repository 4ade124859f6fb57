"""Runs the pending attempts: bounded concurrency, infra retries, resume, interrupt."""

from __future__ import annotations

import signal
import threading
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Callable

import structlog

from agentcompass.errors import InfraError, TrialError
from agentcompass.progress import Progress
from agentcompass.results import ResultsStore, TrialResult, now_iso
from agentcompass.task import Task
from agentcompass.trial import TrialRunner

log = structlog.get_logger("agentcompass")


class Interrupted(Exception):
    """Ctrl-C or SIGTERM: stop scheduling, close sandboxes, keep what finished."""


@dataclass
class RetryPolicy:
    max_retries: int
    backoff_s: float

    def delay(self, retry: int) -> float:
        return self.backoff_s * (2 ** (retry - 1))


class Scheduler:
    def __init__(
        self,
        runner: TrialRunner,
        store: ResultsStore,
        concurrency: int,
        retry: RetryPolicy,
        progress: Progress,
        on_result: Callable[[TrialResult], None] | None = None,
    ) -> None:
        self.runner = runner
        self.store = store
        self.concurrency = concurrency
        self.retry = retry
        self.progress = progress
        self.on_result = on_result
        self.stopping = threading.Event()

    def run(self, pending: list[tuple[Task, int]]) -> None:
        """Run every (task, attempt); raises Interrupted after cleaning up on Ctrl-C/SIGTERM."""
        previous = install_sigterm()
        queue = list(reversed(pending))
        in_flight: set[Future[None]] = set()
        pool = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="trial")
        try:
            while queue or in_flight:
                while queue and len(in_flight) < self.concurrency:
                    task, attempt = queue.pop()
                    in_flight.add(pool.submit(self._run_one, task, attempt))
                done, in_flight = wait(in_flight, timeout=0.5, return_when=FIRST_COMPLETED)
                for future in done:
                    future.result()  # _run_one records its own errors; this surfaces bugs only
        except KeyboardInterrupt as exc:
            self.stopping.set()
            closed = self.runner.sandboxes.close_all()
            log.warning("interrupted: stopped scheduling and closed open sandboxes", closed=closed)
            pool.shutdown(wait=True, cancel_futures=True)
            raise Interrupted() from exc
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)

    def _run_one(self, task: Task, attempt: int) -> None:
        if self.stopping.is_set():
            return
        self.progress.started(task.id, attempt)
        retries = 0
        while True:
            trial_dir = self.store.fresh_trial_dir(task.id, attempt)
            started = now_iso()
            try:
                result = self.runner.run(task, attempt, trial_dir)
                break
            except Exception as exc:  # a bug or an infra failure: the trial is an infra error
                error = exc if isinstance(exc, TrialError) else InfraError(f"{type(exc).__name__}: {exc}")
                if self.stopping.is_set():
                    return  # interrupted trials are not recorded: a rerun runs them again
                if error.retryable and retries < self.retry.max_retries:
                    retries += 1
                    delay = self.retry.delay(retries)
                    log.warning("infra error, retrying", task=task.id, attempt=attempt, retry=retries, delay_s=delay, error=str(error))
                    if self.stopping.wait(delay):
                        return
                    continue
                result = TrialResult(
                    task_id=task.id, attempt=attempt, status="error", error_category=error.category,
                    message=str(error), started_at=started, finished_at=now_iso(),
                )
                break
        if self.stopping.is_set():
            return
        result.retries = retries
        self.store.record(result)
        log.info("trial finished", task=task.id, attempt=attempt, status=result.status,
                 category=result.error_category, message=result.message[:300], seconds=result.timings.get("total"))
        self.progress.finished(result)
        if self.on_result:
            self.on_result(result)


def install_sigterm() -> signal.Handlers | None:
    """SIGTERM behaves like Ctrl-C, so a `kill` also closes every sandbox."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt()

    return signal.signal(signal.SIGTERM, handler)  # type: ignore[return-value]
