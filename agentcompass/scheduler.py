"""Runs the pending attempts: bounded concurrency, infra retries, resume, interrupt."""

from __future__ import annotations

import signal
import threading
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

import structlog
import tenacity

from agentcompass.errors import InfraError, TrialError, UserError
from agentcompass.progress import Progress
from agentcompass.results import ResultsStore, TrialResult, now_iso
from agentcompass.task import Task, Usage
from agentcompass.trial import TrialRunner

log = structlog.get_logger("agentcompass")


class RunStopped(UserError):
    """A trial hit an error that is every trial's (credentials rejected, an invalid setting): the run
    stops scheduling, closes its sandboxes and reports that one line (exit 2); unrecorded trials rerun."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM, after cleaning up: sandboxes closed, finished trials kept.

    A KeyboardInterrupt, so no `except Exception` on the way up swallows it."""


@dataclass
class RetryPolicy:
    max_retries: int
    backoff_s: float  # the first retry waits this long, each later one twice the one before


class Scheduler:
    def __init__(
        self,
        runner: TrialRunner,
        store: ResultsStore,
        concurrency: int,
        retry: RetryPolicy,
        progress: Progress,
    ) -> None:
        self.runner = runner
        self.store = store
        self.concurrency = concurrency
        self.retry = retry
        self.progress = progress
        self.stopping = threading.Event()
        self.fatal: TrialError | None = None  # an error no retry or other task gets past: the run stops

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
                if self.fatal is not None:
                    raise RunStopped(str(self.fatal))
        except RunStopped:
            self.runner.sandboxes.close_all()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
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

    def _try_once(self, task: Task, attempt: int) -> TrialResult:
        """One try of an attempt in a fresh trial dir; anything unexpected is an infra error."""
        trial_dir = self.store.fresh_trial_dir(task.id, attempt)
        try:
            return self.runner.run(task, attempt, trial_dir)
        except TrialError:
            raise
        except Exception as exc:  # a bug or an unexpected failure: recorded and retried as infra
            raise InfraError(f"{type(exc).__name__}: {exc}") from exc

    def _sleep(self, seconds: float) -> None:
        """Backoff that an interrupt cuts short; the next try then stops at once."""
        if self.stopping.wait(seconds):
            raise InfraError("interrupted")

    def _run_one(self, task: Task, attempt: int) -> None:
        if self.stopping.is_set():
            return
        started = now_iso()
        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception(
                lambda e: isinstance(e, TrialError) and e.retryable and not self.stopping.is_set()),
            stop=tenacity.stop_after_attempt(self.retry.max_retries + 1),
            wait=tenacity.wait_exponential(multiplier=self.retry.backoff_s),
            sleep=self._sleep,
            before_sleep=lambda state: log.warning(
                "infra error, retrying", task=task.id, attempt=attempt, retry=state.attempt_number,
                delay_s=state.upcoming_sleep, error=str(state.outcome.exception())),
            reraise=True,
        )
        try:
            result = retrying(self._try_once, task, attempt)
        except TrialError as error:
            if getattr(error, "fatal", False):
                self.fatal = self.fatal or error
                self.stopping.set()
                return  # not the task's fault: a rerun after the fix runs it again
            if self.stopping.is_set():
                return  # interrupted trials are not recorded: a rerun runs them again
            result = TrialResult(task_id=task.id, attempt=attempt, status="error", error_category=error.category,
                                 message=str(error), usage=error.usage or Usage(), started_at=started,
                                 finished_at=now_iso())
        if self.stopping.is_set():
            return
        result.retries = retrying.statistics.get("attempt_number", 1) - 1
        self.store.record(result)
        log.info("trial finished", task=task.id, attempt=attempt, status=result.status,
                 category=result.error_category, message=result.message[:300], seconds=result.timings.get("total"))
        self.progress.finished(result)


def install_sigterm() -> signal.Handlers | None:
    """SIGTERM behaves like Ctrl-C, so a `kill` also closes every sandbox."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt()

    return signal.signal(signal.SIGTERM, handler)  # type: ignore[return-value]
