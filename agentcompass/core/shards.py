"""Trials spread over worker processes, so the orchestrator's own work uses every core.

At a thousand concurrent trials one process is bound by its GIL: each trial's few hundred
microseconds of Python queue behind every other's. Past a few hundred trials at once, and where
the provider can be forked (its state is plain data, no SDK threads or sockets), the scheduler
forks worker processes once everything is loaded. Each runs its share of the trial threads and
pulls (run, task, attempt) indices off one shared pipe, so no process idles while another has a
backlog. Every finished trial goes back to this process over the worker's own pipe: this process
alone appends to trials.jsonl (group-committed, so a SIGKILL still loses no recorded trial), writes
each result.json, keeps the summary and prints progress. A worker keeps to one core
(agentcompass.core.cores). A worker dies with this process
(PR_SET_PDEATHSIG) and leaves Ctrl-C to it: the first interrupt here is forwarded once (close its
sandboxes, wind down), a second cuts that short, as in one process.

This module is the parent's side: fork, feed, collect and record, wind down. Whether to fork at all is
agentcompass.core.shard_policy's; the worker's side is agentcompass.core.shard_worker; the messages
between them are agentcompass.core.shard_pipes."""

from __future__ import annotations

import fcntl
import os
import select
import selectors
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog

from agentcompass.core.cores import pin_worker
from agentcompass.core.durable import write_all
from agentcompass.core.results import TrialResult
from agentcompass.core.shard_pipes import INDEX, Frames, encode
from agentcompass.core.shard_worker import worker_main
from agentcompass.core.signals import EXIT_INTERRUPTED, GRACE_S, STOP_SIGNALS, install_handlers

if TYPE_CHECKING:
    from agentcompass.core.lanes import Lane, Schedule
    from agentcompass.core.task import Task

log = structlog.get_logger("agentcompass")
PIPE_BYTES = 1 << 20  # /proc/sys/fs/pipe-max-size's default
READ_CHUNK = 1 << 18
# Results that arrive this close together are recorded as one batch (one append, one fsync). Without
# it, trials that finish spread out (as they do once their starts are spread) cost an fsync each.
COMMIT_LINGER_S = 0.01


@dataclass
class Worker:
    pid: int
    results: int  # read end of its messages
    control: int  # write end of what the parent tells it (a lane closed)
    frames: Frames = field(default_factory=Frames)


def run_in_processes(scheduler: "Schedule", items: list[tuple["Lane", "Task", int]], threads: int,
                     processes: int) -> None:
    """Fork `processes` workers sharing `threads` trial threads; record what they finish until all are
    done. Raises KeyboardInterrupt on an interrupt, after the workers wound down (or were cut short)."""
    parent = os.getpid()
    work_read, work_write = os.pipe()
    workers: list[Worker] = []
    sys.stdout.flush()
    sys.stderr.flush()
    for number in range(processes):
        share = threads // processes + (number < threads % processes)
        results_read, results_write = os.pipe()
        widen(results_write)
        control_read, control_write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the worker: never returns
            for fd in (work_write, results_read, control_write, *(w.results for w in workers),
                       *(w.control for w in workers)):
                os.close(fd)
            pin_worker(number)
            worker_main(scheduler, items, share, parent, work_read, results_write, control_read)
        os.close(results_write)
        os.close(control_read)
        workers.append(Worker(pid, results_read, control_write))
    os.close(work_read)
    feeder = threading.Thread(target=feed, args=(work_write, len(items)), name="work-feeder", daemon=True)
    feeder.start()
    try:
        collect(scheduler, workers)
    except KeyboardInterrupt:
        scheduler.stopping.set()
        wind_down(scheduler, workers)
        raise
    finally:
        for worker in workers:
            for fd in (worker.results, worker.control):
                try:
                    os.close(fd)
                except OSError:
                    pass


def widen(fd: int) -> None:
    """A worker's pipe holds about a thousand results, not a hundred: it goes on while the parent fsyncs."""
    try:
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except (OSError, AttributeError):  # above the system's pipe-max-size, or not Linux: the default will do
        pass


def feed(fd: int, count: int) -> None:
    """Every work index into the shared pipe, then its end: the workers' reads return nothing once it is drained."""
    per_write = select.PIPE_BUF // INDEX  # a write this small is atomic: readers never see part of an index
    try:
        for start in range(0, count, per_write):
            write_all(fd, b"".join(i.to_bytes(INDEX, "little") for i in range(start, min(count, start + per_write))))
    except OSError:  # every worker is gone (interrupted): nobody reads any more
        pass
    finally:
        os.close(fd)


def collect(scheduler: "Schedule", workers: list[Worker]) -> None:
    """Record every finished trial the workers send, in batches (one append, one fsync each), until
    every worker has closed its pipe; then reap them. A worker that died is every lane's failure."""
    lanes = scheduler.lanes
    selector = selectors.DefaultSelector()
    for worker in workers:
        selector.register(worker.results, selectors.EVENT_READ, worker)
    live = len(workers)
    buffer = bytearray(READ_CHUNK)  # read into, not allocated per read
    while live:
        messages: list[tuple[str, int, Any]] = []
        deadline = None  # once the batch's first message is in: COMMIT_LINGER_S for others to join it
        while live and (deadline is None or time.monotonic() < deadline):
            timeout = 0.5 if deadline is None else deadline - time.monotonic()
            for key, _ in selector.select(max(timeout, 0.0)):
                worker = key.data
                size = os.readv(worker.results, [buffer])
                if not size:
                    selector.unregister(worker.results)
                    live -= 1
                    continue
                messages.extend(worker.frames.feed(buffer[:size]))
            if not messages:
                break  # nothing in half a second: look again (the loop above ends once every worker is done)
            deadline = deadline or time.monotonic() + COMMIT_LINGER_S
        if messages:
            handle(scheduler, workers, messages)
    selector.close()
    for worker in workers:
        _, status = os.waitpid(worker.pid, 0)
        code = os.waitstatus_to_exitcode(status)
        if code not in (0, EXIT_INTERRUPTED) and not scheduler.stopping.is_set():
            failure = (f"a worker process ended with {'signal ' + str(-code) if code < 0 else 'exit code ' + str(code)} "
                       "(killed from outside, or out of memory); rerun the same command to run its unfinished trials")
            for lane in lanes:
                if lane.pending and failure not in lane.failures:
                    lane.failures.append(failure)
                    lane.closed.set()


def handle(scheduler: "Schedule", workers: list[Worker], messages: list[tuple[str, int, Any]]) -> None:
    lanes = scheduler.lanes
    finished: dict[int, list[tuple[TrialResult, bytes]]] = {}
    for kind, index, payload in messages:
        if kind == "result":
            finished.setdefault(index, []).append((TrialResult.model_validate_json(payload), payload))
        elif kind == "retrying":
            scheduler.progress.retrying(*payload)
        elif kind in ("fatal", "failure"):
            lane = lanes[index]
            if kind == "fatal":
                lane.fatal = lane.fatal or payload
            elif payload not in lane.failures:
                lane.failures.append(payload)
            lane.closed.set()
            tell(workers, "close", index, lane.fatal)
    if scheduler.stopping.is_set():
        return  # interrupted: nothing more is recorded (the rerun runs these again)
    for index, entries in finished.items():
        lane = lanes[index]
        if lane.fatal is not None:
            continue  # the lane stopped on an error every trial meets: in-flight trials are not recorded
        try:
            lane.store.commit(entries)
        except OSError as exc:  # trials.jsonl unwritable: this run stops, as when a worker thread fails
            message = f"{type(exc).__name__}: {exc}"
            lane.failures.append(message)
            lane.closed.set()
            tell(workers, "close", index, None)
            continue
        for result, line in entries:  # as in one process: result.json once the line is durable
            lane.store.write_result_json(result.task_id, result.attempt, line)
            scheduler.progress.finished(result, lane.label)


def tell(workers: list[Worker], kind: str, lane: int, payload: Any) -> None:
    frame = encode(kind, lane, payload)
    for worker in workers:
        try:
            write_all(worker.control, frame)
        except OSError:  # that worker is already gone
            pass


def wind_down(scheduler: "Schedule", workers: list[Worker]) -> None:
    """Forward the interrupt once (each worker closes its sandboxes, its trials wind down) and wait for
    the workers; a second interrupt forwards again (they cut their waits short) and they are killed."""
    hurry = threading.Event()
    install_handlers(STOP_SIGNALS, lambda signum, frame: hurry.set())
    signal_all(workers, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S + 5  # their own grace, plus closing their sandboxes
    forwarded_hurry = False
    while any_alive(workers) and time.monotonic() < deadline:
        if hurry.is_set() and not forwarded_hurry:
            signal_all(workers, signal.SIGTERM)
            forwarded_hurry = True
            deadline = min(deadline, time.monotonic() + 1)
        time.sleep(0.05)
    if any_alive(workers):
        signal_all(workers, signal.SIGKILL)
    for worker in workers:
        try:
            os.waitpid(worker.pid, 0)
        except ChildProcessError:
            pass
    # log.jsonl only: the command prints the one documented line
    log.info("interrupted: stopped scheduling; the worker processes closed their sandboxes", workers=len(workers))


def signal_all(workers: list[Worker], sig: int) -> None:
    for worker in workers:
        try:
            os.kill(worker.pid, sig)
        except ProcessLookupError:
            pass


def any_alive(workers: list[Worker]) -> bool:
    alive = False
    for worker in workers:
        try:
            pid, _ = os.waitpid(worker.pid, os.WNOHANG)
        except ChildProcessError:
            continue
        alive = alive or pid == 0
    return alive
