"""Wilson score intervals for the report's rates (pass@1, solved rate).

Why Wilson and not the percentile bootstrap the cost figures use: on a small sample, or a rate of
0 % or 100 %, every resample gives the same rate, so the bootstrap's interval collapses to the point
(a setup that solved 6 of 6 showed "100.0 % (100.0 % - 100.0 %)"), which claims a certainty six
tasks cannot give. Wilson's interval inverts the score test: it has close to its nominal coverage at
any n and rate, and at 6/6 it says 61 % - 100 % (Agresti & Coull 1998; Brown, Cai & DasGupta 2001;
inspect_ai and the "error bars for evals" note recommend it, or a clustered standard error, which
also collapses at 0 and 100 %).

n is the number of tasks, not attempts: attempts of one task are not independent (the clustering
the evals literature warns about), so pass@1, the mean over tasks of each task's pass rate, is
treated as a proportion over its tasks; with several attempts per task this is conservative."""

from __future__ import annotations

import math
from statistics import NormalDist


def wilson(rate: float, n: int, confidence: float = 0.95) -> tuple[float, float] | None:
    """The Wilson score interval of a proportion `rate` observed over `n` units; None when n is 0."""
    if n <= 0:
        return None
    z = NormalDist().inv_cdf(1 - (1 - confidence) / 2)
    z2n = z * z / n
    centre = (rate + z2n / 2) / (1 + z2n)
    half = z / (1 + z2n) * math.sqrt(rate * (1 - rate) / n + z2n / (4 * n))
    return max(0.0, centre - half), min(1.0, centre + half)
