"""A forked worker process (agentcompass.core.shards): it runs its share of the trial threads over the
shared work queue and sends every finished trial, retry notice and lane stop to the parent, which alone
records and prints. It dies with the parent and leaves Ctrl-C to it."""

from __future__ import annotations

import atexit
import ctypes
import os
import pickle
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any

from agentcompass.core.errors import FatalInfraError
from agentcompass.core.results import TrialResult
from agentcompass.core.shard_pipes import Channel, Frames, PipeQueue
from agentcompass.core.signals import leave_ctrl_c_to_parent

if TYPE_CHECKING:
    from agentcompass.core.lanes import Lane, Schedule
    from agentcompass.core.task import Task

PR_SET_PDEATHSIG = 1


class WorkerProgress:
    """A worker's progress: retry notices go to the parent, which alone prints."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel

    def retrying(self, task_id: str, attempt: int, retry: int, max_retries: int, delay: float, reason: str,
                 label: str = "") -> None:
        self.channel.send("retrying", -1, (task_id, attempt, retry, max_retries, delay, reason, label))


def worker_main(scheduler: "Schedule", items: list[tuple["Lane", "Task", int]], threads: int, parent: int,
                work: int, results: int, control: int) -> None:
    """Run trial threads over the shared queue until it is drained; report every trial to the parent."""
    code = 1
    atexit._clear()  # the parent's exit handlers are the parent's; the worker's own (draining its work) run below
    try:
        die_with_parent(parent)
        leave_ctrl_c_to_parent()
        channel = Channel(results)
        index_of = {id(lane): i for i, lane in enumerate(scheduler.lanes)}
        scheduler.progress = WorkerProgress(channel)  # type: ignore[assignment]
        scheduler.report = lambda lane, result: report(channel, index_of[id(lane)], result)
        scheduler.lane_stopped = lambda lane, kind, payload: channel.send(kind, index_of[id(lane)], portable(payload))
        threading.Thread(target=listen, args=(scheduler, control), name="control", daemon=True).start()
        code = scheduler.supervise(PipeQueue(work, items), threads)
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


def listen(scheduler: "Schedule", control: int) -> None:
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
