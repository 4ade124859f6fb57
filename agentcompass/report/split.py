"""Share a self-hosted endpoint's cost among the trials that used it, by concurrency.

An exact sweep line over the trials' generation intervals: at every instant the cost is
shared equally by the trials generating then. With an hourly rate the endpoint costs that
rate while at least one trial generates; with a bill, each billing bucket's cost is spread
over the union of generation time inside the bucket, so the split adds up to the bill.
A trial's `sole` cost is what its own generation time would cost alone; the split never
exceeds it (sole is rounded up). Times are whole microseconds (as model_calls.jsonl records
them) and shares exact fractions; money is apportioned in micro-dollars by largest remainder,
so the totals reconcile with the bill to the micro-dollar.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from typing import Hashable, Iterable, Iterator

MICRO = Decimal("0.000001")
US = 1_000_000  # microseconds per second
Interval = tuple[float, float]  # (start, end), epoch seconds


@dataclass(frozen=True)
class Bucket:
    """One billing interval [start, end) and what it cost."""

    start: float
    end: float
    cost: Decimal


@dataclass
class Split:
    shares: dict[Hashable, Decimal]  # each trial's part of the cost
    sole: dict[Hashable, Decimal]  # each trial's cost had it been alone on the endpoint
    billed_usd: Decimal  # the bill's total (with an hourly rate: the cost of the union of generation)
    unattributed_usd: Decimal  # billed buckets in which no trial generated (idle endpoint)
    uncovered_s: float  # generation time outside every bucket: the bill cannot price it
    buckets: list[dict[str, object]] = field(default_factory=list)
    uncovered: dict[Hashable, float] = field(default_factory=dict)  # per trial, its generation outside every bucket
    attributed: list[Decimal] = field(default_factory=list)  # per bucket (in time order), what the trials were charged


class Tally:
    """Generation time in one pricing span: the union, and per trial its own time and its
    time by how many trials shared it (integers, so the hot loop never builds fractions)."""

    def __init__(self) -> None:
        self.union = 0
        self.own: dict[Hashable, int] = {}
        self.by_count: dict[Hashable, dict[int, int]] = {}

    def add(self, length: int, active: list[Hashable]) -> None:
        self.union += length
        count = len(active)
        for key in active:
            self.own[key] = self.own.get(key, 0) + length
            shared = self.by_count.setdefault(key, {})
            shared[count] = shared.get(count, 0) + length

    def share(self, key: Hashable) -> Fraction:
        """The trial's share of the union, in microseconds: each piece divided by its sharers."""
        return sum((Fraction(length, count) for count, length in self.by_count.get(key, {}).items()), Fraction(0))


def micros(seconds: float) -> int:
    return round(seconds * US)


def merged(intervals: Iterable[Interval]) -> list[tuple[int, int]]:
    """A trial's intervals as disjoint sorted ones (a trial counts once however it overlaps itself)."""
    out: list[list[int]] = []
    for start, end in sorted((micros(s), micros(e)) for s, e in intervals):
        if end <= start:
            continue
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [(s, e) for s, e in out]


def segments(trials: dict[Hashable, list[tuple[int, int]]],
             cuts: Iterable[int] = ()) -> Iterator[tuple[int, int, list[Hashable]]]:
    """Consecutive pieces of time, split at every interval end and every cut, with the trials
    generating throughout each piece (only pieces where some trial generates)."""
    events: dict[int, list[tuple[int, Hashable]]] = {}
    for key, spans in trials.items():
        for start, end in spans:
            events.setdefault(start, []).append((1, key))
            events.setdefault(end, []).append((-1, key))
    for cut in cuts:
        events.setdefault(cut, [])
    active: dict[Hashable, None] = {}  # ordered set
    times = sorted(events)
    for here, after in zip(times, times[1:] + [None]):
        for delta, key in events[here]:
            if delta < 0:
                active.pop(key, None)
        for delta, key in events[here]:
            if delta > 0:
                active[key] = None
        if after is not None and active:
            yield here, after, list(active)


def apportion(exact: dict[Hashable, Fraction], total: Decimal) -> dict[Hashable, Decimal]:
    """Round each exact share to micro-dollars so that they add up to `total` exactly."""
    units = int(total / MICRO)
    floors = {k: math.floor(v * US) for k, v in exact.items()}
    left = units - sum(floors.values())
    by_remainder = sorted(exact, key=lambda k: exact[k] * US - floors[k], reverse=True)
    for key in by_remainder[:max(0, left)]:
        floors[key] += 1
    return {k: Decimal(v) * MICRO for k, v in floors.items()}


def to_micro(value: Fraction, up: bool = False) -> Decimal:
    """Micro-dollars: rounded half to even, or up (a sole cost is an upper bound)."""
    units = math.ceil(value * US) if up else round(value * US)
    return Decimal(units) * MICRO


def split_hourly(intervals: dict[Hashable, list[Interval]], hourly_usd: float | Decimal) -> Split:
    """The endpoint costs `hourly_usd` while any trial generates; each instant shared equally."""
    per_us = Fraction(Decimal(str(hourly_usd))) / 3600 / US
    trials = {k: merged(v) for k, v in intervals.items()}
    tally = Tally()
    for start, end, active in segments(trials):
        tally.add(end - start, active)
    exact = {k: tally.share(k) * per_us for k in trials}
    sole = {k: to_micro(tally.own.get(k, 0) * per_us, up=True) for k in trials}
    return Split(apportion(exact, to_micro(tally.union * per_us)), sole, to_micro(tally.union * per_us), Decimal(0), 0.0)


def split_bill(intervals: dict[Hashable, list[Interval]], buckets: list[Bucket]) -> Split:
    """Each bucket's cost over the union of generation time inside it, shared by concurrency."""
    buckets = sorted(buckets, key=lambda b: b.start)
    edges = [(micros(b.start), micros(b.end)) for b in buckets]
    trials = {k: merged(v) for k, v in intervals.items()}
    tallies = [Tally() for _ in buckets]
    uncovered = 0
    uncovered_by: dict[Hashable, int] = {}
    index = 0
    for start, end, active in segments(trials, [t for edge in edges for t in edge]):
        while index < len(edges) and edges[index][1] <= start:  # pieces come in time order
            index += 1
        if index < len(edges) and edges[index][0] <= start and end <= edges[index][1]:
            tallies[index].add(end - start, active)
        else:
            uncovered += end - start
            for key in active:
                uncovered_by[key] = uncovered_by.get(key, 0) + end - start
    exact = {k: Fraction(0) for k in trials}
    sole = {k: Fraction(0) for k in trials}
    unattributed = Decimal(0)
    rows: list[dict[str, object]] = []
    for bucket, tally in zip(buckets, tallies):
        if tally.union == 0:
            unattributed += bucket.cost
        else:
            per_us = Fraction(bucket.cost) / tally.union  # USD per microsecond of generation in this bucket
            for key in tally.own:
                exact[key] += tally.share(key) * per_us
                sole[key] += tally.own[key] * per_us
        rows.append({"start": bucket.start, "end": bucket.end, "cost_usd": str(bucket.cost),
                     "generation_union_s": tally.union / US, "trials": len(tally.own)})
    billed = sum((b.cost for b in buckets), Decimal(0))
    shares = apportion(exact, billed - unattributed)
    attributed = [Decimal(0) if tally.union == 0 else bucket.cost for bucket, tally in zip(buckets, tallies)]
    return Split(shares, {k: to_micro(v, up=True) for k, v in sole.items()}, billed, unattributed, uncovered / US, rows,
                 {k: v / US for k, v in uncovered_by.items()}, attributed)
