"""How many attempts of a setup ran at once: the peak, and the average over the time any of them ran.

The cost benchmark prices a self-hosted endpoint by the hour and splits each hour among the attempts generating in
it, so how busy the endpoint was (its concurrency) decides what an attempt costs; the study prints both figures
beside its dollars. Here they come from each attempt's recorded window (started_at .. finished_at).
"""

from __future__ import annotations

from typing import Iterable


def concurrency(windows: Iterable[tuple[float, float]]) -> tuple[int, float | None]:
    """(peak, average) over `windows` (start, end) in seconds. The average is attempt-seconds over the seconds in
    which at least one attempt ran, so idle gaps between batches do not dilute it. (0, None) without a window.
    An attempt that ends exactly when another starts does not overlap it."""
    edges = sorted((t, step) for start, end in windows if end > start for t, step in ((start, 1), (end, -1)))
    if not edges:
        return 0, None
    running = peak = 0
    busy = weighted = 0.0
    previous = edges[0][0]
    for moment, step in edges:  # at a tie the end (-1) sorts first, so touching windows never count as overlapping
        if running:
            busy += moment - previous
            weighted += running * (moment - previous)
        running += step
        peak = max(peak, running)
        previous = moment
    return peak, round(weighted / busy, 2) if busy else None
