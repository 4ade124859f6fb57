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
sandboxes, wind down), a second cuts that short, as in one process."""

from __future__ import annotations

import atexit
import ctypes
import fcntl
import os
import pickle
import queue
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
from agentcompass.core.errors import FatalInfraError, UserError
from agentcompass.core.results import TrialResult

if TYPE_CHECKING:
    from agentcompass.core.scheduler import Lane, Scheduler
    from agentcompass.core.task import Task

log = structlog.get_logger("agentcompass")
TRIALS_PER_PROCESS = 128  # below this many concurrent trials per process, one process keeps up
INDEX = 4  # bytes per work item in the shared pipe: writes and reads this small are atomic
HEADER = 4  # bytes of a message's length prefix
PR_SET_PDEATHSIG = 1
EXIT_INTERRUPTED = 130
PIPE_BYTES = 1 << 20  # /proc/sys/fs/pipe-max-size's default
READ_CHUNK = 1 << 18
# Results that arrive this close together are recorded as one batch (one append, one fsync). Without
# it, trials that finish spread out (as they do once their starts are spread) cost an fsync each.
COMMIT_LINGER_S = 0.01
SEND_LINGER_S = 0.005  # likewise a worker's sender: one pipe write (and one wake-up here) per batch


def processes_for(lanes: list["Lane"], concurrency: int, setting: int | None) -> int:
    """How many processes run these lanes: `setting` when given (run.processes), else one per core
    once there are at least TRIALS_PER_PROCESS concurrent trials per process; one where forking is unsafe."""
    if why_not(lanes):
        return 1
    if setting is not None:
        return max(1, min(setting, concurrency))
    return max(1, min(len(os.sched_getaffinity(0)), concurrency // TRIALS_PER_PROCESS))


def why_not(lanes: list["Lane"]) -> str | None:
    """Why these lanes must stay in one process, if they must."""
    if not hasattr(os, "fork"):
        return "this platform cannot fork"
    for lane in lanes:
        runner = lane.runner
        reason = stays_in_one_process(runner.provider, runner.gateway is not None,
                                      runner.pacer.limit is not None or runner.pacer.qps is not None,
                                      runner.keep_environment)
        if reason:
            return reason
    return None


def stays_in_one_process(provider: Any, uses_gateway: bool, paced: bool, keep_environment: bool) -> str | None:
    if not getattr(provider, "fork_safe", False):
        return f"the {provider.name} provider keeps connections or threads a fork would break"
    if uses_gateway:
        return "the model gateway's per-trial tokens live in one process"
    if paced:
        return "the provider limit and creation rate (run.provider_limit, run.env_open_qps) are counted in one process"
    if keep_environment:
        return "kept sandboxes are reported by the process that ran them"
    return None


def check_processes(resolved: Any, provider: Any, harness_cls: type) -> None:
    """run.processes > 1 where the run must stay in one process: one line before anything is written."""
    setting = resolved.run.processes
    if setting is None or setting <= 1:
        return
    paced = any((resolved.run.provider_limit, resolved.run.env_open_qps,
                 getattr(provider, "default_provider_limit", None), getattr(provider, "default_open_qps", None)))
    reason = stays_in_one_process(provider, getattr(harness_cls, "uses_gateway", False), paced,
                                  resolved.run.keep_environment)
    if reason:
        raise UserError(f"run.processes={setting} cannot be honoured here ({reason}); "
                        "leave run.processes unset (one process) or use --env local")


# -- messages: a length prefix, then a pickled (kind, lane index, payload) ----------------------
def encode(kind: str, lane: int, payload: Any) -> bytes:
    body = pickle.dumps((kind, lane, payload), protocol=pickle.HIGHEST_PROTOCOL)
    return len(body).to_bytes(HEADER, "little") + body


class Frames:
    """Complete messages out of a byte stream read in arbitrary chunks."""

    def __init__(self) -> None:
        self.buffer = bytearray()

    def feed(self, data: bytes) -> list[tuple[str, int, Any]]:
        self.buffer += data
        messages, start = [], 0
        while len(self.buffer) - start >= HEADER:
            size = int.from_bytes(self.buffer[start:start + HEADER], "little")
            if len(self.buffer) - start - HEADER < size:
                break
            messages.append(pickle.loads(self.buffer[start + HEADER:start + HEADER + size]))
            start += HEADER + size
        del self.buffer[:start]
        return messages


class Channel:
    """A worker's end of its pipe to the parent. Trial threads queue their messages; one sender thread
    writes whatever has queued in one write. No trial thread holds a lock across the write: one that
    did would wait for the GIL with the lock held, and every other trial would queue behind it."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._queue: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._sender = threading.Thread(target=self._send_queued, name="results-sender", daemon=True)
        self._sender.start()

    def send(self, kind: str, lane: int, payload: Any) -> None:
        self._queue.put(encode(kind, lane, payload))

    def close(self) -> None:
        """Once every queued message is written."""
        self._queue.put(None)
        self._sender.join()

    def _send_queued(self) -> None:
        done = False
        while not done:
            frames = [self._queue.get()]
            while True:
                try:
                    frames.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            done = None in frames
            try:
                write_all(self.fd, b"".join(frame for frame in frames if frame is not None))
            except OSError:  # the parent is gone; this worker follows it (PR_SET_PDEATHSIG)
                return
            if not done:
                time.sleep(SEND_LINGER_S)  # let the next results queue up


class PipeQueue:
    """The shared work queue, as seen by one worker: indices into the parent's list, read off one pipe.

    Each read takes one index, with no lock: the feeder writes whole indices in atomic writes and every
    read asks for exactly one, so the kernel hands each thread a whole one. (A lock held across the
    read would make every trial thread wait for the one that holds it to get the GIL back.)"""

    def __init__(self, fd: int, items: list[tuple["Lane", "Task", int]]) -> None:
        self.fd, self.items = fd, items

    def popleft(self) -> tuple["Lane", "Task", int]:
        data = os.read(self.fd, INDEX)
        if not data:  # the parent wrote every index and every one is taken
            raise IndexError("empty")
        return self.items[int.from_bytes(data, "little")]


class WorkerProgress:
    """A worker's progress: retry notices go to the parent, which alone prints."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel

    def retrying(self, task_id: str, attempt: int, retry: int, max_retries: int, delay: float, reason: str,
                 label: str = "") -> None:
        self.channel.send("retrying", -1, (task_id, attempt, retry, max_retries, delay, reason, label))


@dataclass
class Worker:
    pid: int
    results: int  # read end of its messages
    control: int  # write end of what the parent tells it (a lane closed)
    frames: Frames = field(default_factory=Frames)


def run_in_processes(scheduler: "Scheduler", items: list[tuple["Lane", "Task", int]], threads: int,
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


def collect(scheduler: "Scheduler", workers: list[Worker]) -> None:
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


def handle(scheduler: "Scheduler", workers: list[Worker], messages: list[tuple[str, int, Any]]) -> None:
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


def wind_down(scheduler: "Scheduler", workers: list[Worker]) -> None:
    """Forward the interrupt once (each worker closes its sandboxes, its trials wind down) and wait for
    the workers; a second interrupt forwards again (they cut their waits short) and they are killed."""
    from agentcompass.core.scheduler import GRACE_S, STOP_SIGNALS, install_handlers

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
    log.warning("interrupted: stopped scheduling; the worker processes closed their sandboxes", workers=len(workers))


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


# -- the worker process -----------------------------------------------------------------------
def worker_main(scheduler: "Scheduler", items: list[tuple["Lane", "Task", int]], threads: int, parent: int,
                work: int, results: int, control: int) -> None:
    """Run trial threads over the shared queue until it is drained; report every trial to the parent."""
    code = 1
    atexit._clear()  # the parent's exit handlers are the parent's; the worker's own (draining its work) run below
    try:
        die_with_parent(parent)
        # The parent forwards each interrupt as a SIGTERM. A handler, not SIG_IGN: an ignored signal stays
        # ignored across exec, and the trials' commands must still take Ctrl-C (Terminal-Bench's timeouts send it).
        signal.signal(signal.SIGINT, lambda signum, frame: None)
        channel = Channel(results)
        index_of = {id(lane): i for i, lane in enumerate(scheduler.lanes)}
        scheduler.progress = WorkerProgress(channel)  # type: ignore[assignment]
        scheduler.report = lambda lane, result: report(channel, index_of[id(lane)], result)
        scheduler.lane_stopped = lambda lane, kind, payload: channel.send(kind, index_of[id(lane)], portable(payload))
        threading.Thread(target=listen, args=(scheduler, control), name="control", daemon=True).start()
        code = scheduler.supervise(PipeQueue(work, items), threads)  # type: ignore[arg-type]
        channel.close()
    except BaseException:  # a worker must never return into the parent's code
        code = 1
    finally:
        atexit._run_exitfuncs()  # e.g. the local provider's workspace removals, queued on a thread
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def portable(payload: Any) -> Any:
    """What the parent can unpickle: an error of a class it cannot rebuild travels as its message."""
    try:
        pickle.loads(pickle.dumps(payload))
        return payload
    except Exception:
        return FatalInfraError(str(payload))


def report(channel: Channel, index: int, result: TrialResult) -> None:
    """Send the finished trial to the parent, which records it and writes its result.json (its own GIL's work)."""
    channel.send("result", index, result.model_dump_json().encode("utf-8") + b"\n")


def listen(scheduler: "Scheduler", control: int) -> None:
    """What the parent says: a lane closed (a fatal error or a failure in any worker)."""
    frames = Frames()
    while True:
        try:
            data = os.read(control, 1 << 16)
        except OSError:
            return
        if not data:
            return
        for kind, index, payload in frames.feed(data):
            if kind == "close":
                lane = scheduler.lanes[index]
                if payload is not None:
                    lane.fatal = lane.fatal or payload
                lane.closed.set()


def die_with_parent(parent: int) -> None:
    """SIGKILL this worker when the parent dies, however it dies (a SIGKILL included)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)
