"""Share a self-hosted endpoint's cost among the trials that used it, by concurrency.

An exact sweep line over the trials' generation intervals: at every instant the cost is
shared equally by the trials generating then. With an hourly rate the endpoint costs that
rate while at least one trial generates; with a bill, each billing bucket's cost is spread
over the union of generation time inside the bucket, so the split adds up to the bill.
A trial's `sole` cost is what its own generation time would cost alone; the split never
exceeds it (sole is rounded up). All arithmetic is exact (fractions), and money is apportioned in micro-dollars
by largest remainder, so the totals reconcile with the bill to the micro-dollar.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from typing import Hashable, Iterable, Iterator

MICRO = Decimal("0.000001")
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


def merged(intervals: Iterable[Interval]) -> list[tuple[Fraction, Fraction]]:
    """A trial's intervals as disjoint sorted ones (a trial counts once however it overlaps itself)."""
    out: list[list[Fraction]] = []
    for start, end in sorted((Fraction(s), Fraction(e)) for s, e in intervals if e > s):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [(s, e) for s, e in out]


def segments(trials: dict[Hashable, list[tuple[Fraction, Fraction]]],
             cuts: Iterable[Fraction] = ()) -> Iterator[tuple[Fraction, Fraction, list[Hashable]]]:
    """Consecutive pieces of time, split at every interval end and every cut, with the trials
    generating throughout each piece (only pieces where some trial generates)."""
    events: dict[Fraction, list[tuple[int, Hashable]]] = {}
    for key, spans in trials.items():
        for start, end in spans:
            events.setdefault(start, []).append((1, key))
            events.setdefault(end, []).append((-1, key))
    for cut in cuts:
        events.setdefault(Fraction(cut), [])
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
    floors = {k: int(v / Fraction(MICRO)) for k, v in exact.items()}  # int() of a positive Fraction floors
    left = units - sum(floors.values())
    by_remainder = sorted(exact, key=lambda k: exact[k] / Fraction(MICRO) - floors[k], reverse=True)
    for key in by_remainder[:max(0, left)]:
        floors[key] += 1
    return {k: Decimal(v) * MICRO for k, v in floors.items()}


def to_micro(value: Fraction, up: bool = False) -> Decimal:
    """Micro-dollars: rounded half to even, or up (a sole cost is an upper bound)."""
    units = math.ceil(value * 10**6) if up else round(value * 10**6)
    return Decimal(units) * MICRO


def split_hourly(intervals: dict[Hashable, list[Interval]], hourly_usd: float | Decimal) -> Split:
    """The endpoint costs `hourly_usd` while any trial generates; each instant shared equally."""
    per_second = Fraction(Decimal(str(hourly_usd))) / 3600
    trials = {k: merged(v) for k, v in intervals.items()}
    exact = {k: Fraction(0) for k in trials}
    union = Fraction(0)
    for start, end, active in segments(trials):
        union += end - start
        for key in active:
            exact[key] += (end - start) * per_second / len(active)
    billed = to_micro(union * per_second)
    sole = {k: to_micro(sum((e - s for s, e in spans), Fraction(0)) * per_second, up=True) for k, spans in trials.items()}
    return Split(apportion(exact, billed), sole, billed, Decimal(0), 0.0)


def split_bill(intervals: dict[Hashable, list[Interval]], buckets: list[Bucket]) -> Split:
    """Each bucket's cost over the union of generation time inside it, shared by concurrency."""
    buckets = sorted(buckets, key=lambda b: b.start)
    trials = {k: merged(v) for k, v in intervals.items()}
    cuts = [Fraction(c) for b in buckets for c in (b.start, b.end)]
    # Per bucket: the union of generation time, and each trial's exact share of that time.
    union = [Fraction(0)] * len(buckets)
    share_s: list[dict[Hashable, Fraction]] = [{} for _ in buckets]
    own_s: list[dict[Hashable, Fraction]] = [{} for _ in buckets]
    uncovered = Fraction(0)
    for start, end, active in segments(trials, cuts):
        index = bucket_of(buckets, start, end)
        if index is None:
            uncovered += end - start
            continue
        union[index] += end - start
        for key in active:
            share_s[index][key] = share_s[index].get(key, Fraction(0)) + (end - start) / len(active)
            own_s[index][key] = own_s[index].get(key, Fraction(0)) + (end - start)
    exact = {k: Fraction(0) for k in trials}
    sole = {k: Fraction(0) for k in trials}
    unattributed = Decimal(0)
    rows: list[dict[str, object]] = []
    for index, bucket in enumerate(buckets):
        cost = Fraction(bucket.cost)
        if union[index] == 0:
            unattributed += bucket.cost
        else:
            rate = cost / union[index]  # USD per second of generation in this bucket
            for key, seconds in share_s[index].items():
                exact[key] += seconds * rate
            for key, seconds in own_s[index].items():
                sole[key] += seconds * rate
        rows.append({"start": bucket.start, "end": bucket.end, "cost_usd": str(bucket.cost),
                     "generation_union_s": float(union[index]), "trials": len(share_s[index])})
    billed = sum((b.cost for b in buckets), Decimal(0))
    return Split(apportion(exact, billed - unattributed), {k: to_micro(v, up=True) for k, v in sole.items()},
                 billed, unattributed, float(uncovered), rows)


def bucket_of(buckets: list[Bucket], start: Fraction, end: Fraction) -> int | None:
    """The bucket holding the piece [start, end) (pieces never straddle a bucket edge)."""
    for index, bucket in enumerate(buckets):
        if Fraction(bucket.start) <= start and end <= Fraction(bucket.end):
            return index
    return None
