"""95 % intervals for the report's rates and cost per solved task, and paired differences.

pass@1 and the solved rate: Wilson score intervals over the setup's tasks (report/intervals.py says
why: the bootstrap collapses at 0 %, 100 % and on small samples). Cost per solved task and the
paired differences: a percentile bootstrap over tasks. A resample draws as many tasks as the setup ran,
with replacement; every attempt of a drawn task comes with it (attempts of one task are not
independent, tasks are). Each figure is a ratio of two sums over the tasks, recomputed on every
resample; the interval is the 2.5th and 97.5th percentiles of the recomputed values.

- pass@1: the mean over tasks with a graded attempt of passed / graded (the run summary's rule:
  an infrastructure error is no verdict and is kept out of the denominator);
- solved rate: tasks with a passing attempt / tasks run;
- cost per solved task: the cost of every attempt / tasks solved (unbounded when a resample solves none).
  A cost the report cannot give to one task (an attempt interrupted before it was recorded) is
  added whole to every resample, as it is to the figure itself.

Setups run on the same tasks are resampled with the same draws, so the difference of their
figures on one resample is a paired difference: the interval of `a - b` shows whether two setups
really differ on these tasks (it excludes 0) or whether the tasks cannot tell them apart.
The generator is seeded and draws with `random()` only (whose stream Python keeps across
versions), so a report and its `--verify` get the same intervals to the last digit.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Callable, Sequence

RESAMPLES = 2000
SEED = 0
CONFIDENCE = 0.95
METHOD = {
    "method": "pass@1 and solved rate: Wilson score interval over the setup's tasks (n = tasks); cost per solved "
              "task and paired differences: percentile bootstrap over tasks (a resample draws the setup's tasks "
              "with replacement, each with all its attempts); setups run on the same tasks share the draws, so "
              "their differences are paired",
    "resamples": RESAMPLES, "seed": SEED, "confidence": CONFIDENCE,
}
FIGURES = ("pass_at_1", "solved_rate", "cost_per_solved_usd")


@dataclass(frozen=True)
class TaskTally:
    """One task of one setup: its attempts, how many were graded and passed, what they all cost."""

    task_id: str
    attempts: int
    graded: int
    passed: int
    cost_usd: Decimal | None  # None: some attempt's cost is unknown


# Each figure as (numerator, denominator) of one task; the figure is sum(numerators) / sum(denominators).
Parts = Callable[[TaskTally], tuple[float, float]]
PARTS: dict[str, Parts] = {
    "pass_at_1": lambda t: (t.passed / t.graded, 1.0) if t.graded else (0.0, 0.0),
    "solved_rate": lambda t: (float(t.passed > 0), 1.0),
    "cost_per_solved_usd": lambda t: (float(t.cost_usd or 0), float(t.passed > 0)),
}


def ratio(numerator: float, denominator: float) -> float | None:
    """None: nothing to divide by (no graded task); +inf: a cost with nothing solved."""
    if denominator:
        return numerator / denominator
    return math.inf if numerator else None


def percentile(ordered: Sequence[float], q: float) -> float:
    """Linear interpolation between the closest ranks (numpy's default)."""
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    if math.isinf(ordered[high]):
        return ordered[high] if position > low else ordered[low]
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def interval(values: list[float | None]) -> tuple[float, float] | None:
    """The central CONFIDENCE interval of the resampled values (resamples without a value left out)."""
    ordered = sorted(v for v in values if v is not None)
    if not ordered:
        return None
    tail = (1 - CONFIDENCE) / 2
    return percentile(ordered, tail), percentile(ordered, 1 - tail)


def resampled(groups: dict[str, list[TaskTally]], extra: dict[str, float], resamples: int = RESAMPLES,
              seed: int = SEED) -> dict[str, dict[str, list]]:
    """Every figure of every setup on each resample. `groups` maps setup names to tallies listed in
    the same task order; all of them get the same draws. A fresh generator per call, so a setup's
    interval never depends on which other setups are in the report."""
    rng = random.Random(seed)
    n = len(next(iter(groups.values())))
    parts = {name: {figure: ([p(t)[0] for t in tallies], [p(t)[1] for t in tallies]) for figure, p in PARTS.items()}
             for name, tallies in groups.items()}
    out: dict[str, dict[str, list]] = {name: {figure: [] for figure in PARTS} for name in groups}
    draw = rng.random
    for _ in range(resamples):
        picks = [int(draw() * n) for _ in range(n)]
        for name, figures in parts.items():
            for figure, (numerators, denominators) in figures.items():
                added = extra.get(name, 0.0) if figure == "cost_per_solved_usd" else 0.0
                out[name][figure].append(ratio(sum(map(numerators.__getitem__, picks)) + added,
                                               sum(map(denominators.__getitem__, picks))))
    return out


def rounded(figure: str, value: float | None) -> Any:
    """Rates to 6 places; money as micro-dollar text like every cost; None/inf: no bound (unbounded)."""
    if value is None or math.isinf(value):
        return None
    if figure == "cost_per_solved_usd":
        return str(Decimal(repr(value)).quantize(Decimal("0.000001")))
    return round(value, 6)


def bounds(figure: str, values: list[float | None]) -> dict[str, Any]:
    found = interval(values)
    low, high = found if found else (None, None)
    return {"low": rounded(figure, low), "high": rounded(figure, high)}


def differences(a: list[float | None], b: list[float | None]) -> list[float | None]:
    """a - b on each resample; undefined where either is (inf - inf included)."""
    out: list[float | None] = []
    for x, y in zip(a, b):
        out.append(None if x is None or y is None or (math.isinf(x) and math.isinf(y)) else x - y)
    return out


def analyse(setups: dict[str, list[TaskTally]], extra_cost: dict[str, Decimal | None] | None = None,
            resamples: int = RESAMPLES) -> dict[str, Any]:
    """Intervals per setup and paired differences per pair of setups run on the same tasks:
    {"setups": {name: {figure: {"low", "high"}}}, "pairs": [...]}. Setup order is kept.
    `extra_cost`: per setup, cost outside its tallies (None: unknown, so no cost interval)."""
    extra_cost = extra_cost or {}
    known = {name: name not in extra_cost or extra_cost[name] is not None for name in setups}
    known = {name: ok and all(t.cost_usd is not None for t in setups[name]) for name, ok in known.items()}
    extra = {name: float(extra_cost.get(name) or 0) for name in setups}
    by_tasks: dict[tuple[str, ...], list[str]] = {}
    for name, tallies in setups.items():
        by_tasks.setdefault(tuple(sorted(t.task_id for t in tallies)), []).append(name)
    per_setup: dict[str, dict[str, Any]] = {}
    pairs: list[dict[str, Any]] = []
    for task_ids, names in by_tasks.items():
        if not task_ids:
            per_setup.update({name: {f: {"low": None, "high": None} for f in FIGURES} for name in names})
            continue
        ordered = {name: sorted(setups[name], key=lambda t: t.task_id) for name in names}
        values = resampled(ordered, extra, resamples)
        for name in names:
            per_setup[name] = {f: bounds(f, values[name][f]) if known[name] or f != "cost_per_solved_usd"
                               else {"low": None, "high": None} for f in FIGURES}
            per_setup[name].update(rate_bounds(ordered[name]))
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                pairs.append(pair(a, b, ordered, values, len(task_ids), known, extra))
    return {"setups": {name: per_setup[name] for name in setups}, "pairs": pairs}


def rate_bounds(tallies: list[TaskTally]) -> dict[str, dict[str, Any]]:
    """pass@1 and the solved rate as Wilson intervals over the tasks that count for each."""
    from agentcompass.report.intervals import wilson

    out = {}
    for figure, n in (("pass_at_1", sum(1 for t in tallies if t.graded)), ("solved_rate", len(tallies))):
        rate = total(tallies, figure)
        found = None if rate is None else wilson(rate, n, CONFIDENCE)
        low, high = found if found else (None, None)
        out[figure] = {"low": rounded(figure, low), "high": rounded(figure, high)}
    return out


def pair(a: str, b: str, tallies: dict[str, list[TaskTally]], values: dict[str, dict[str, list]], tasks: int,
         known: dict[str, bool], extra: dict[str, float]) -> dict[str, Any]:
    row: dict[str, Any] = {"a": a, "b": b, "tasks": tasks}
    for figure in FIGURES:
        if figure == "cost_per_solved_usd" and not (known[a] and known[b]):
            row[figure] = {"diff": None, "low": None, "high": None, "differs": None}
            continue
        point = differences([total(tallies[a], figure, extra[a])], [total(tallies[b], figure, extra[b])])[0]
        spread = differences(values[a][figure], values[b][figure])
        found = interval(spread)
        # An interval that excludes 0 says the tasks tell the two apart; None: nothing to tell by.
        differs = None if found is None else found[0] > 0 or found[1] < 0
        row[figure] = {"diff": rounded(figure, point), **bounds(figure, spread), "differs": differs}
    return row


def total(tallies: list[TaskTally], figure: str, extra: float = 0.0) -> float | None:
    """The figure on the tasks as run (no resampling)."""
    parts = [PARTS[figure](t) for t in tallies]
    return ratio(sum(p[0] for p in parts) + (extra if figure == "cost_per_solved_usd" else 0.0), sum(p[1] for p in parts))
