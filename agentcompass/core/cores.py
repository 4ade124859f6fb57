"""Which cores a forked worker process (agentcompass.core.shards) runs on, and what it starts runs on.

A worker's trial threads run one at a time anyway (they share its GIL), so a worker keeps to one
core: each hand-off of the GIL is then a switch on that core, not a wake-up sent to another one
(in a virtual machine, a trip through the hypervisor). At a thousand trials that halves the CPU a
run takes. The commands a worker starts for its trials (the local provider's) get every core back."""

from __future__ import annotations

import os

_pinned: set[int] | None = None  # this worker's core, once pinned
_every: set[int] = set()  # the cores the run was allowed before pinning


def pin_worker(number: int) -> None:
    """Keep this (freshly forked) worker and the threads it starts on one core: worker n on the n-th allowed one."""
    global _pinned, _every
    try:
        every = os.sched_getaffinity(0)
        core = {sorted(every)[number % len(every)]}
        os.sched_setaffinity(0, core)
    except (AttributeError, OSError):  # not Linux, or a cpuset that forbids it: run unpinned
        return
    _pinned, _every = core, every


class EveryCore:
    """`with EveryCore():` around starting a process: it may run on every core the run may use, not only
    this worker's. Affinity is per thread, so only the calling thread moves, and only for the start."""

    def __enter__(self) -> None:
        if _pinned is not None:
            os.sched_setaffinity(0, _every)

    def __exit__(self, *exc: object) -> None:
        if _pinned is not None:
            os.sched_setaffinity(0, _pinned)
