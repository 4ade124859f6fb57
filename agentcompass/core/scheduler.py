"""Runs the pending attempts: bounded concurrency, infra retries, resume, interrupt.

One plain thread per concurrent trial pulls (run, task, attempt) off a shared queue until
it is empty; the main thread only waits, so it stays free to take Ctrl-C. A run is one
lane; a pooled sweep schedules every run's lane under one cap, their trials interleaved
round-robin so each run advances at the same pace. Past a few hundred trials at once the threads
are spread over worker processes (agentcompass.core.shards), this process recording for them all.
Lanes are agentcompass.core.lanes'; how Ctrl-C, SIGTERM and SIGHUP become an interrupt, agentcompass.core.signals'.
"""

from __future__ import annotations

import gc
import resource
import signal
import sys
import threading
import time
import traceback
from collections import deque
from pathlib import Path
from typing import Any, Callable

import structlog

from agentcompass.core.errors import InfraError, TrialError, UserError
from agentcompass.core.logs import attributed_to
from agentcompass.core.progress import Progress, first_line
from agentcompass.core.lanes import Lane, interleave
from agentcompass.core.results import TrialResult, iso, now_iso
from agentcompass.core.shard_policy import processes_for
from agentcompass.core.shards import run_in_processes
from agentcompass.core.signals import (EXIT_INTERRUPTED, GRACE_S, STOP_SIGNALS, Interrupted, install_handlers,
                                       raise_interrupt, restore_handlers)
from agentcompass.core.task import Task, Usage

log = structlog.get_logger("agentcompass")
FDS_PER_TRIAL = 4  # about what a trial holds open at once (pipes, sockets, files), for the limit check
# Every thread waiting for the GIL wakes once per switch interval (5 ms by default): with
# hundreds of trials waking together that is most of the run's CPU (futex calls). Trials give
# the GIL up at every sandbox call anyway, so a longer interval costs them nothing.
SWITCH_INTERVAL_S = 0.05
# A process's trial threads take their first trial this far apart, not all at once. Started together,
# hundreds of trials open their sandboxes together, come back together and queue for the GIL (and
# for a provider's API) after every call, for the whole run: identical steps keep them in step.
# About one trial's own orchestration time apart (0.5 ms per trial start at 2,000 trials a second per
# process), the first round spreads out and stays spread.
START_SPACING_S = 0.0005
# The cycle collector's young generation, collected every this many allocations (700 by default): a trial
# makes thousands of objects that die young by reference counting, and with hundreds of trials in flight
# each young collection walks all their live state. Collected 30x less often, a run of 10,000 trials
# spends a fraction of the collector's CPU; the frozen start-up heap is never walked either way.
GC_YOUNG_THRESHOLD = 20_000


class RunStopped(UserError):
    """A trial hit an error that is every trial's (credentials rejected, an invalid setting): the run
    stops scheduling, closes its sandboxes and reports that one line (exit 2); unrecorded trials rerun."""


class RunFailed(Exception):
    """A worker failed outside any trial (trials.jsonl unwritable, a bug): the run stopped
    scheduling, let the trials in flight finish, and ends "failed"."""


class Scheduler:
    def __init__(self, lanes: list[Lane], concurrency: int, progress: Progress, processes: int | None = None) -> None:
        self.lanes = lanes
        self.concurrency = concurrency
        self.progress = progress
        self.processes = processes  # run.processes: None picks (agentcompass.core.shards)
        self.stopping = threading.Event()  # interrupted: nothing more is started or recorded
        self._lock = threading.Lock()
        self._running = 0
        self._all_done = threading.Event()
        # Where a finished trial goes, and who hears that a lane stopped: here, this process; in a
        # worker process (agentcompass.core.shards), the parent that records for every worker.
        self.report: Callable[[Lane, TrialResult], None] = self._record_here
        self.lane_stopped: Callable[[Lane, str, Any], None] = lambda lane, kind, payload: None

    def run(self) -> None:
        """Run every lane's attempts. Raises Interrupted after cleaning up on Ctrl-C/SIGTERM/SIGHUP; a lane
        that met a fatal error (its `fatal`) or whose worker failed (its `failures`) stopped alone."""
        items = interleave(self.lanes)
        workers = min(self.concurrency, len(items))
        if workers == 0:
            return
        check_fd_limit(workers)
        processes = processes_for(self.lanes, workers, self.processes)
        previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
        for sig in STOP_SIGNALS[1:]:
            if previous[sig] is not signal.SIG_IGN:  # under nohup, SIGHUP stays ignored
                install_handlers((sig,), raise_interrupt)
        switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        # What exists now (tasks, config, modules) lives as long as the run: out of the collector's
        # sight, each of its full passes walks only what the trials made, not thousands of tasks
        # (and forked workers share those pages instead of copying them).
        gc.freeze()
        thresholds = gc.get_threshold()
        gc.set_threshold(GC_YOUNG_THRESHOLD, *thresholds[1:])
        try:
            if processes > 1:
                try:
                    run_in_processes(self, items, workers, processes)
                except KeyboardInterrupt as exc:
                    raise Interrupted() from exc
            elif self.supervise(deque(items), workers) == EXIT_INTERRUPTED:
                raise Interrupted()
        finally:
            restore_handlers(previous)
            sys.setswitchinterval(switch_interval)
            gc.set_threshold(*thresholds)
            gc.unfreeze()

    def supervise(self, queue: Any, threads: int) -> int:
        """Start `threads` workers on `queue` and wait for them; 0 once they are done, EXIT_INTERRUPTED
        after winding down on an interrupt."""
        scheduled = [lane for lane in self.lanes if lane.pending]
        try:
            self._start_workers(queue, threads)
            while not self._all_done.wait(0.5):
                if all(lane.fatal is not None for lane in scheduled):  # every trial would meet one: stop all
                    self._wind_down()
                    break
                for lane in scheduled:
                    if lane.fatal is not None and not lane.runner.sandboxes.closing.is_set():
                        lane.runner.sandboxes.close_all()  # its trials in flight abandon their waits
        except KeyboardInterrupt:
            self.stopping.set()
            self._wind_down()
            return EXIT_INTERRUPTED
        return 0

    def _start_workers(self, queue: deque[tuple[Lane, Task, int]], count: int) -> None:
        """Start the workers, which wait for the last to start before taking work (each start waits for
        its thread to run, which behind hundreds of busy trials would take the GIL's queue every time),
        then take their first trial START_SPACING_S apart."""
        go = threading.Event()
        try:
            for i in range(count):
                thread = threading.Thread(target=self._work, args=(queue, go, i * START_SPACING_S), name=f"trial-{i}",
                                          daemon=True)
                with self._lock:
                    self._running += 1
                try:
                    thread.start()
                except RuntimeError as exc:  # the thread limit: go on with the workers that did start
                    self._worker_done()
                    if i == 0:
                        raise RunFailed(f"cannot start a worker thread: {exc}") from exc
                    log.warning("fewer workers than --task-concurrency", started=i, error=str(exc))
                    return
                except BaseException:  # Ctrl-C while threads start: this one is not running, so not counted
                    if not thread.is_alive():
                        self._worker_done()
                    raise
        finally:
            go.set()

    def _wind_down(self) -> None:
        """After the first interrupt (or a fatal error in every lane): close every sandbox, then give workers
        GRACE_S to return. A second interrupt cuts either wait short; the caller then exits at once."""
        for lane in self.lanes:
            lane.closed.set()
        providers = {id(lane.runner.provider): lane.runner.provider for lane in self.lanes}
        for provider in providers.values():
            interrupt = getattr(provider, "interrupt", None)
            if callable(interrupt):
                interrupt()  # e.g. image builds in flight, which are no sandbox yet
        hurry = threading.Event()
        install_handlers(STOP_SIGNALS, lambda signum, frame: hurry.set())
        closed: list[int] = []
        closer = threading.Thread(target=lambda: closed.append(sum(lane.runner.sandboxes.close_all() for lane in self.lanes)),
                                  daemon=True)
        closer.start()
        while closer.is_alive() and not hurry.is_set():
            closer.join(0.1)
        deadline = time.monotonic() + GRACE_S
        while not self._all_done.is_set() and not hurry.is_set() and time.monotonic() < deadline:
            self._all_done.wait(0.1)
        fatal = next((lane.fatal for lane in self.lanes if lane.fatal is not None), None)
        if fatal is not None and not self.stopping.is_set():  # the caller reports the error itself, in one line
            log.info("stopped: an error no trial can get past", error=str(fatal),
                     closed=closed[0] if closed else "unknown (cut short)", workers_left=self._running)
        else:  # log.jsonl only: the command prints the one documented line (Ctrl-C, SIGTERM or SIGHUP alike)
            log.info("interrupted: stopped scheduling and closed open sandboxes",
                     closed=closed[0] if closed else "unknown (cut short)", workers_left=self._running)

    def _work(self, queue: deque[tuple[Lane, Task, int]], go: threading.Event, delay: float) -> None:
        try:
            go.wait()
            if delay:
                self.stopping.wait(delay)  # its place in the first round (START_SPACING_S); an interrupt ends it
            while not self.stopping.is_set():
                try:
                    lane, task, attempt = queue.popleft()
                except IndexError:
                    return
                if lane.closed.is_set():
                    continue
                try:
                    with attributed_to(lane.store.dir):
                        self._run_one(lane, task, attempt)
                except BaseException as exc:  # outside any trial: stop scheduling this run, end it "failed"
                    lane.closed.set()
                    lane.failures.append(f"{type(exc).__name__}: {exc}")
                    self.lane_stopped(lane, "failure", lane.failures[-1])
                    with attributed_to(lane.store.dir):
                        log.error("worker failed; no new trials are started", error=f"{type(exc).__name__}: {exc}")
                        log.info("worker failure", traceback=traceback.format_exc())  # log.jsonl only, not the console
        finally:
            self._worker_done()

    def _worker_done(self) -> None:
        with self._lock:
            self._running -= 1
            if self._running == 0:
                self._all_done.set()

    def _abandoned(self, lane: Lane) -> bool:
        """Interrupted, or the lane stopped on a fatal error: trials in flight are not recorded (a rerun runs them)."""
        return self.stopping.is_set() or lane.fatal is not None

    def _run_one(self, lane: Lane, task: Task, attempt: int) -> None:
        """All tries of one attempt; records the outcome unless interrupted. The usage of failed
        tries is added to the attempt's, and their files are kept under try-<n>/."""
        started, t0 = time.time(), time.monotonic()
        spent = Usage()
        trial_dir: Path | None = None
        tries = 0
        while True:
            tries += 1
            try:
                if trial_dir is None:
                    trial_dir = lane.store.fresh_trial_dir(task.id, attempt)
                else:
                    lane.store.keep_failed_try(trial_dir, tries - 1)
                result = lane.runner.run(task, attempt, trial_dir)
                result.usage = spent + result.usage
                break
            except Exception as exc:  # anything unexpected in a try is an infra error, retried
                error = exc if isinstance(exc, TrialError) else InfraError(f"{type(exc).__name__}: {exc}")
                spent = spent + (error.usage or Usage())
                if getattr(error, "fatal", False):  # credentials rejected, a missing permission or quota: every trial's
                    lane.fatal = lane.fatal or error
                    lane.closed.set()
                    self.lane_stopped(lane, "fatal", lane.fatal)
                if self._abandoned(lane):
                    self._set_aside(lane, trial_dir, task, attempt)
                    return
                if not error.retryable or tries > lane.retry.max_retries:
                    result = TrialResult(task_id=task.id, attempt=attempt, status="error",
                                         error_category=error.category, message=str(error), usage=spent,
                                         timings={"total": round(time.monotonic() - t0, 4)},
                                         started_at=iso(started), finished_at=now_iso())
                    break
                delay = lane.retry.delay(tries)
                log.info("infra error, retrying", task=task.id, attempt=attempt, retry=tries, delay_s=round(delay, 2),
                         error=str(error))
                self.progress.retrying(task.id, attempt, tries, lane.retry.max_retries, delay, str(error), lane.label)
                lane.closed.wait(delay)  # cut short by an interrupt or the run's fatal error
                if self._abandoned(lane):
                    self._set_aside(lane, trial_dir, task, attempt)
                    return
        if self._abandoned(lane):
            self._set_aside(lane, trial_dir, task, attempt)
            return
        result.retries = tries - 1
        if result.status == "error":
            log.info("trial error", task=task.id, attempt=attempt, category=result.error_category,
                     message=first_line(result.message, 300))
        self.report(lane, result)

    @staticmethod
    def _set_aside(lane: Lane, trial_dir: Path | None, task: Task, attempt: int) -> None:
        """A try cut short has no record: its files go to abandoned/ at once, so the calls it paid for count
        in this session's last summary (a kill before this leaves them for the resume to set aside)."""
        if trial_dir is None:
            return
        try:
            lane.store.set_aside(trial_dir, task.id, attempt, recorded=False)
        except OSError as exc:  # the resume sets it aside instead
            log.warning("could not set an interrupted try aside", task=task.id, attempt=attempt, error=str(exc))

    def _record_here(self, lane: Lane, result: TrialResult) -> None:
        lane.store.record(result)  # returns once the line is durable: only then is the trial finished
        self.progress.finished(result, lane.label)


def check_fd_limit(concurrency: int) -> None:
    """Raise the soft open-files limit to the hard one; say so when the concurrency still cannot fit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    needed = concurrency * FDS_PER_TRIAL + 64
    if soft != resource.RLIM_INFINITY and soft < needed:
        log.warning(f"--task-concurrency {concurrency} needs about {needed} open files but the limit is {soft}; "
                    f"raise it (`ulimit -n {needed}`, as root or in limits.conf) or lower the concurrency")
