"""The pacer: at most N sandboxes open at once, at most Q creations a second beyond the bucket's burst."""

from __future__ import annotations

import threading
import time

from agentcompass.core.errors import InfraError
from agentcompass.core.pacing import Pacer


def run_trials(pacer: Pacer, count: int, hold_s: float) -> tuple[list[float], int]:
    """`count` trials at once, each holding its turn `hold_s`; returns the times turns began and the most open."""
    starts: list[float] = []
    open_now = most = 0
    lock = threading.Lock()

    def trial() -> None:
        nonlocal open_now, most
        with pacer.turn():
            with lock:
                starts.append(time.monotonic())
                open_now += 1
                most = max(most, open_now)
            time.sleep(hold_s)
            with lock:
                open_now -= 1

    threads = [threading.Thread(target=trial) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sorted(starts), most


def assert_rate(starts: list[float], qps: float, burst: float) -> None:
    """Between any two creations, no more than the burst plus the rate times the time between them."""
    for i, first in enumerate(starts):
        for j in range(i, len(starts)):
            assert j - i + 1 <= burst + qps * (starts[j] - first) + 0.05, (i, j, starts[j] - first)


def test_creations_never_exceed_the_rate_beyond_the_burst():
    starts, _ = run_trials(Pacer(qps=2), 20, hold_s=0)
    assert_rate(starts, 2, 2)
    assert starts[-1] - starts[0] >= (20 - 2) / 2 - 0.1  # and it really waited


def test_never_more_than_the_limit_open():
    starts, most = run_trials(Pacer(limit=3), 12, hold_s=0.2)
    assert most == 3
    assert starts[-1] - starts[0] >= 0.2 * 3 - 0.05


def test_waiting_is_reported_and_an_abort_ends_the_wait():
    seen: list[int] = []
    pacer = Pacer(limit=1, on_waiting=seen.append)
    stop = threading.Event()
    with pacer.turn():
        waiter_error: list[Exception] = []

        def waiter() -> None:
            try:
                with pacer.turn(abort=stop.is_set):
                    pass
            except InfraError as exc:
                waiter_error.append(exc)

        thread = threading.Thread(target=waiter)
        thread.start()
        time.sleep(0.3)
        stop.set()
        thread.join(2)
    assert not thread.is_alive() and waiter_error
    assert 1 in seen and seen[-1] == 0


def test_no_pacing_waits_for_nothing():
    with Pacer().turn() as waited:
        assert waited == 0.0
