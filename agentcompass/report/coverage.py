"""The part of a bill that the run is charged: each interval's cost times the fraction of it covered
by the union of the self-hosted jobs' windows (every trial of the endpoint from its start to its
finish), as the Coding Agent Cost Benchmark bills its runs (its `refresh_billing`). The rest of an
interval is time the endpoint served no job of these results: another run's, or idle."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal
from fractions import Fraction
from typing import Iterable

from agentcompass.report.split import MICRO, US, Bucket, Interval, merged as union, micros


@dataclass(frozen=True)
class Covered:
    """One bill interval, how much of it the jobs' window covers, and what that part costs."""

    bucket: Bucket
    covered_s: float
    billed: Decimal  # bucket.cost × covered / length, in micro-dollars

    def charged(self) -> Bucket:
        """The interval as the concurrency split prices it: only its covered part's cost."""
        return Bucket(self.bucket.start, self.bucket.end, self.billed)


def covered_us(merged: list[tuple[int, int]], start: int, end: int) -> int:
    return sum(max(0, min(end, e) - max(start, s)) for s, e in merged)


def cover(buckets: list[Bucket], windows: Iterable[Interval]) -> list[Covered]:
    """Each bucket with the seconds of it inside the jobs' window and its cost times that fraction."""
    jobs = union(windows)  # one disjoint sorted list, as a trial's own calls are merged
    out = []
    for bucket in sorted(buckets, key=lambda b: b.start):
        start, end = micros(bucket.start), micros(bucket.end)
        inside = covered_us(jobs, start, end)
        exact = Fraction(bucket.cost) * inside / (end - start)
        billed = (Decimal(exact.numerator) / Decimal(exact.denominator)).quantize(MICRO, ROUND_HALF_EVEN)
        out.append(Covered(bucket, inside / US, billed))
    return out


def window(windows: Iterable[Interval]) -> tuple[float, float, float] | None:
    """The jobs' first start, last finish and the seconds their union spans; None without jobs."""
    merged = union(windows)
    if not merged:
        return None
    return merged[0][0] / US, merged[-1][1] / US, sum(e - s for s, e in merged) / US
