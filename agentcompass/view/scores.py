"""The headline figures of one run for the viewer, from its rows, and their 95 % intervals.

An attempt with an infrastructure error that used up its retries has no verdict; every other
attempt counts, an agent error as a failure, as the official harnesses count it. The intervals are
the cost report's bootstrap over tasks (report/stats.py), so the viewer and the report agree."""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal
from typing import Any

from agentcompass.report.stats import TaskTally, analyse


def graded(row: dict[str, Any]) -> bool:
    return row["status"] in ("passed", "failed") or (row["status"] == "error" and row["category"] != "infra")


def tallies(rows: list[dict[str, Any]], k: int) -> list[TaskTally]:
    by_task: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        if 1 <= row["attempt"] <= k:
            by_task[row["task"]].append(row)
    out = []
    for task, attempts in sorted(by_task.items()):
        known = all(r["cost_known"] and r["cost"] is not None for r in attempts)
        cost = sum((Decimal(str(r["cost"])) for r in attempts), Decimal(0)) if known else None
        out.append(TaskTally(task, len(attempts), sum(graded(r) for r in attempts),
                             sum(r["status"] == "passed" for r in attempts), cost))
    return out


def headline(rows: list[dict[str, Any]], k: int, tasks_selected: int | None, resamples: int = 1000) -> dict[str, Any]:
    """Counts, pass@1 (over tasks with a verdict) and solved rate (over the selection) with intervals."""
    counts: dict[str, int] = defaultdict(int)
    errors: dict[str, int] = defaultdict(int)
    for row in rows:
        counts[row["status"]] += 1
        if row["status"] == "error":
            errors[row["category"] or "unknown"] += 1
    tally = tallies(rows, k)
    analysis = analyse({"run": tally}, resamples=resamples)["setups"]["run"] if tally else {}
    verdict_tasks = [t for t in tally if t.graded]
    pass_at_1 = sum(t.passed / t.graded for t in verdict_tasks) / len(verdict_tasks) if verdict_tasks else None
    selected = tasks_selected or len(tally)
    solved = sum(t.passed > 0 for t in tally)
    known = all(t.cost_usd is not None for t in tally)
    cost = float(sum((t.cost_usd for t in tally if t.cost_usd is not None), Decimal(0))) if known else None
    return {
        "trials": len(rows), "passed": counts["passed"], "failed": counts["failed"], "errors": counts["error"],
        "errors_by_category": dict(errors), "tasks_selected": selected, "pass_at_1": pass_at_1,
        "pass_at_1_tasks": len(verdict_tasks), "pass_at_1_interval": interval(analysis.get("pass_at_1")),
        "solved": solved, "solved_rate": solved / selected if selected else None,
        "incomplete": errors.get("infra", 0), "cost_usd": cost, "cost_known": known,
        "cost_per_solved_usd": cost / solved if cost is not None and solved else None,
    }


def interval(bounds: dict[str, Any] | None) -> list[float] | None:
    if not bounds or bounds.get("low") is None or bounds.get("high") is None:
        return None
    return [float(bounds["low"]), float(bounds["high"])]
