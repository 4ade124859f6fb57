"""The pipes between the parent and its worker processes (agentcompass.core.shards): length-prefixed
pickled messages, a worker's batching sender, and the shared work queue of indices.

Both sides use them: the parent frames what it tells the workers and reads their results, a worker
sends its results and reads work and the parent's word."""

from __future__ import annotations

import os
import pickle
import queue
import threading
import time
from typing import TYPE_CHECKING, Any

from agentcompass.core.durable import write_all

if TYPE_CHECKING:
    from agentcompass.core.lanes import Lane
    from agentcompass.core.task import Task

INDEX = 4  # bytes per work item in the shared pipe: writes and reads this small are atomic
HEADER = 4  # bytes of a message's length prefix
SEND_LINGER_S = 0.005  # a worker's sender: one pipe write (and one wake-up in the parent) per batch of results


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
