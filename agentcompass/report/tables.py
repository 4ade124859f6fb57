"""The report's tables as rows of plain values: per setup, per trial, per task (difficulty)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from agentcompass.report.costs import Costs
from agentcompass.report.load import Setup, Trial
from agentcompass.report.split import MICRO
from agentcompass.results import summarize

SETUP_COLUMNS = [
    "setup", "benchmark", "harness", "model", "reasoning", "env", "k", "tasks", "attempts", "passed", "failed",
    "errors", "pass_at_1", "pass_at_k", "solved_tasks", "solved_rate", "total_cost_usd", "cost_per_solved_usd",
    "cost_per_passing_attempt_usd", "avg_cost_per_attempt_usd", "cost_basis", "tokens_in", "tokens_out",
    "tokens_cached", "steps", "orchestration_s", "session_s", "generation_s",
    # added by issue 32 (after the others, so readers by name and by position both keep working):
    "retry_cost_usd", "interrupted_attempts", "reported_cost_usd", "cost_difference_pct",
]
TRIAL_COLUMNS = [
    "setup", "task_id", "attempt", "status", "error_category", "reward", "cost_usd", "sole_cost_usd", "cost_basis",
    "steps", "tokens_in", "tokens_out", "tokens_cached", "orchestration_s", "session_s", "generation_s",
    "started_at", "finished_at",
    "retries", "retry_cost_usd", "reported_cost_usd", "cost_difference_pct",
]
DIFFERENCE_SHOWN = Decimal("0.01")  # the harness's own cost is set beside ours when they differ by more


def money(value: Decimal | None) -> str | None:
    """Micro-dollars as text (exact in CSV and JSON); None stays None: unknown, never 0."""
    return None if value is None else str(value.quantize(MICRO))


def ratio(total: Decimal | None, count: int) -> str | None:
    return None if total is None or count == 0 else money(total / count)


def total_of(values: list[Decimal | None]) -> Decimal | None:
    """The sum, or None (unknown) as soon as one part is unknown."""
    return None if any(v is None for v in values) else sum((v for v in values if v is not None), Decimal(0))


def difference_pct(ours: Decimal | None, reported: Decimal | None) -> float | None:
    """How far the harness's own figure is from tokens x prices, in percent, when more than 1 %."""
    if ours is None or reported is None or (ours == 0 and reported == 0):
        return None
    if ours == 0:
        return None  # nothing to compare against; --verify names it
    gap = (reported - ours) / ours
    return round(float(gap) * 100, 2) if abs(gap) > DIFFERENCE_SHOWN else None


def times(trial: Trial) -> dict[str, float]:
    """orchestration_s (whole trial) ⊇ session_s (agent session) ⊇ generation_s (inside model calls)."""
    r = trial.result
    return {"orchestration_s": round(r.timings.get("total", 0.0), 4), "session_s": round(r.timings.get("agent", 0.0), 4),
            "generation_s": round(r.usage.generation_s, 4)}


def trial_rows(setups: list[Setup], costs: Costs) -> list[dict[str, Any]]:
    rows = []
    for setup in setups:
        for trial in setup.trials:
            r, cost = trial.result, costs.trials[trial.key]
            rows.append({
                "setup": setup.name, "task_id": r.task_id, "attempt": r.attempt, "status": r.status,
                "error_category": r.error_category, "reward": r.reward, "cost_usd": money(cost.cost_usd),
                "sole_cost_usd": money(cost.sole_usd), "cost_basis": cost.basis, "steps": r.usage.model_calls,
                "tokens_in": r.usage.tokens_in, "tokens_out": r.usage.tokens_out, "tokens_cached": r.usage.tokens_cached,
                **times(trial), "started_at": r.started_at, "finished_at": r.finished_at,
                "retries": r.retries, "retry_cost_usd": money(cost.retry_usd), "reported_cost_usd": money(cost.reported_usd),
                "cost_difference_pct": difference_pct(cost.cost_usd, cost.reported_usd),
            })
    return rows


def setup_rows(setups: list[Setup], costs: Costs) -> list[dict[str, Any]]:
    rows = []
    for setup in setups:
        results = [t.result for t in setup.trials]
        tasks = sorted({r.task_id for r in results})
        summary = summarize(results, tasks, setup.k)
        interrupted = costs.unrecorded.get(setup.name)
        trial_costs = [costs.trials[t.key] for t in setup.trials] + ([interrupted] if setup.unrecorded and interrupted else [])
        total = total_of([c.cost_usd for c in trial_costs])
        reported = [c.reported_usd for c in trial_costs if c.basis.startswith("per-token")]
        ours = total_of([c.cost_usd for c in trial_costs if c.basis.startswith("per-token")])
        bases = sorted({c.basis for c in trial_costs})
        rows.append({
            "setup": setup.name, "benchmark": setup.labels.get("benchmark"), "harness": setup.labels.get("harness"),
            "model": setup.model.get("name"), "reasoning": setup.model.get("reasoning"), "env": setup.labels.get("env"),
            "k": setup.k, "tasks": len(tasks), "attempts": len(results),
            **{f: summary[f] for f in ("passed", "failed", "errors", "pass_at_1", "pass_at_k", "solved_tasks", "solved_rate")},
            "total_cost_usd": money(total),
            "cost_per_solved_usd": ratio(total, summary["solved_tasks"]),
            "cost_per_passing_attempt_usd": ratio(total, summary["passed"]),
            "avg_cost_per_attempt_usd": ratio(total, len(results)),
            "cost_basis": ", ".join(bases) if bases else None,
            **{f: summary[f] for f in ("tokens_in", "tokens_out", "tokens_cached")},
            "steps": summary["model_calls"],
            **{f: round(sum(times(t)[f] for t in setup.trials), 4) for f in ("orchestration_s", "session_s", "generation_s")},
            "retry_cost_usd": money(total_of([c.retry_usd for c in trial_costs])),
            "interrupted_attempts": len(setup.unrecorded),
            "reported_cost_usd": money(total_of(reported)) if reported else None,
            "cost_difference_pct": difference_pct(ours, total_of(reported)) if reported else None,
        })
    return rows


def difficulty_rows(setups: list[Setup]) -> list[dict[str, Any]]:
    """Per task: pass rate per setup (passed / graded attempts) and overall; hardest first."""
    tasks = sorted({t.result.task_id for s in setups for t in s.trials})
    rows = []
    for task in tasks:
        row: dict[str, Any] = {"task_id": task}
        passed = graded = 0
        for setup in setups:
            verdicts = [t.result.status == "passed" for t in setup.trials
                        if t.result.task_id == task and t.result.status != "error"]
            row[setup.name] = round(sum(verdicts) / len(verdicts), 6) if verdicts else None
            passed, graded = passed + sum(verdicts), graded + len(verdicts)
        row["overall"] = round(passed / graded, 6) if graded else None
        rows.append(row)
    return sorted(rows, key=lambda r: (r["overall"] is None, r["overall"] if r["overall"] is not None else 0, r["task_id"]))
