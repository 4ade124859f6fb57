"""Back-pressure: a quota or rate limit met opening a sandbox lowers the env's limit to what is open,
and the trial waits (not a retry) until a slot and the service let it through."""

from __future__ import annotations

import threading

from agentcompass.core.pacing import Pacer


def test_lowering_keeps_what_is_open_and_never_goes_below_one():
    pacer = Pacer()  # unpaced: still counted, so that back-pressure knows how many are open
    lowered: list[tuple[int, str]] = []
    pacer.on_lowered = lambda limit, reason: lowered.append((limit, reason))
    held, release = threading.Barrier(4), threading.Event()

    def hold() -> None:
        with pacer.turn():
            held.wait()
            release.wait()

    threads = [threading.Thread(target=hold) for _ in range(3)]
    for thread in threads:
        thread.start()
    held.wait()
    assert pacer.lower("Quota 'CPUS' exceeded") == 3 and pacer.limit == 3
    assert pacer.lower("again, with as many open") == 3 and lowered == [(3, "Quota 'CPUS' exceeded")]  # said once
    release.set()
    for thread in threads:
        thread.join()
    assert pacer.lower("nothing open") == 1 and lowered[-1][0] == 1
    assert Pacer(limit=2).lower("x") == 1  # never raised by a lowering
