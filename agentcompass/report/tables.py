"""The report's tables as rows of plain values: per setup, per trial, per task (difficulty)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from agentcompass.report.costs import Costs
from agentcompass.report.load import Setup, Trial
from agentcompass.report.split import MICRO
from agentcompass.report.stats import TaskTally
from agentcompass.results import summarize

SETUP_COLUMNS = [
    "setup", "benchmark", "harness", "model", "reasoning", "env", "k", "tasks", "attempts", "passed", "failed",
    "errors", "pass_at_1", "pass_at_k", "solved_tasks", "solved_rate", "total_cost_usd", "cost_per_solved_usd",
    "cost_per_passing_attempt_usd", "avg_cost_per_attempt_usd", "cost_basis", "tokens_in", "tokens_out",
    "tokens_cached", "steps", "orchestration_s", "session_s", "generation_s",
    # added for the page (after the others, so readers by name and by position both keep working):
    "label", "status", "trials_expected", "pass_at_1_low", "pass_at_1_high", "solved_rate_low", "solved_rate_high",
    "cost_per_solved_low_usd", "cost_per_solved_high_usd", "sole_cost_usd", "tokens_in_per_solved", "tokens_out_per_solved",
]
TASK_COLUMNS = ["task_id", "setup", "attempts", "graded", "passed", "cost_usd"]
PAIR_COLUMNS = ["a", "b", "tasks", *[f"{figure}_{part}" for figure in ("pass_at_1", "solved_rate", "cost_per_solved_usd")
                                     for part in ("diff", "low", "high", "differs")]]
TRIAL_COLUMNS = [
    "setup", "task_id", "attempt", "status", "error_category", "reward", "cost_usd", "sole_cost_usd", "cost_basis",
    "steps", "tokens_in", "tokens_out", "tokens_cached", "orchestration_s", "session_s", "generation_s",
    "started_at", "finished_at",
]


def money(value: Decimal | None) -> str | None:
    """Micro-dollars as text (exact in CSV and JSON); None stays None: unknown, never 0."""
    return None if value is None else str(value.quantize(MICRO))


def ratio(total: Decimal | None, count: int) -> str | None:
    return None if total is None or count == 0 else money(total / count)


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
            })
    return rows


def short_labels(setups: list[Setup]) -> dict[str, str]:
    """model · tier · harness (the model without its provider path), made longer only where two clash."""
    def parts(setup: Setup) -> list[str]:
        model = str(setup.model.get("name") or setup.labels.get("model") or "?").rsplit("/", 1)[-1]
        return [model, *([str(setup.model["reasoning"])] if setup.model.get("reasoning") else []),
                str(setup.labels.get("harness") or "?")]

    extras = [lambda s: s.labels.get("env"), lambda s: s.labels.get("benchmark"), lambda s: s.name]
    labels = {s.name: parts(s) for s in setups}
    for extra in extras:
        texts = [" · ".join(labels[s.name]) for s in setups]
        clashing = [s for s, text in zip(setups, texts) if texts.count(text) > 1]
        if not clashing:
            break
        for s in clashing:
            labels[s.name].append(str(extra(s) or "?"))
    return {name: " · ".join(parts_) for name, parts_ in labels.items()}


def task_tallies(setup: Setup, costs: Costs) -> list[TaskTally]:
    """Per task: attempts, graded (passed or failed; an error is no verdict), passed, and their cost."""
    by_task: dict[str, list[Trial]] = {}
    for trial in setup.trials:
        by_task.setdefault(trial.result.task_id, []).append(trial)
    tallies = []
    for task_id, trials in sorted(by_task.items()):
        task_costs = [costs.trials[t.key].cost_usd for t in trials]
        known = all(c is not None for c in task_costs)
        tallies.append(TaskTally(
            task_id, len(trials), sum(t.result.status != "error" for t in trials),
            sum(t.result.status == "passed" for t in trials),
            sum((c for c in task_costs if c is not None), Decimal(0)) if known else None))
    return tallies


def cost_outside(row: dict[str, Any], tallies: list[TaskTally]) -> Decimal | None:
    """The setup's cost that no task's tally holds (e.g. attempts interrupted before they were
    recorded); None when the total is unknown."""
    if row["total_cost_usd"] is None or any(t.cost_usd is None for t in tallies):
        return None
    return Decimal(row["total_cost_usd"]) - sum((t.cost_usd for t in tallies if t.cost_usd is not None), Decimal(0))


def task_rows(setups: list[Setup], tallies: dict[str, list[TaskTally]]) -> list[dict[str, Any]]:
    """The task x setup grid, one row a cell."""
    return [{"task_id": t.task_id, "setup": s.name, "attempts": t.attempts, "graded": t.graded, "passed": t.passed,
             "cost_usd": money(t.cost_usd)} for s in setups for t in tallies[s.name]]


def pair_rows(pairs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Paired differences flattened for the CSV."""
    return [{"a": p["a"], "b": p["b"], "tasks": p["tasks"],
             **{f"{figure}_{part}": value for figure in ("pass_at_1", "solved_rate", "cost_per_solved_usd")
                for part, value in p[figure].items()}} for p in pairs]


def setup_rows(setups: list[Setup], costs: Costs) -> list[dict[str, Any]]:
    rows = []
    for setup in setups:
        results = [t.result for t in setup.trials]
        tasks = sorted({r.task_id for r in results})
        summary = summarize(results, tasks, setup.k)
        trial_costs = [costs.trials[t.key] for t in setup.trials]
        known = all(c.cost_usd is not None for c in trial_costs)
        total = sum((c.cost_usd for c in trial_costs if c.cost_usd is not None), Decimal(0)) if known else None
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
        })
    return rows


def add_setup_figures(rows: list[dict[str, Any]], setups: list[Setup], costs: Costs,
                      intervals: dict[str, dict[str, Any]]) -> None:
    """The page's figures beside setup_rows' own: the short label, the run's status, the cost alone on
    the endpoint, tokens per solved task and the 95 % intervals (report/stats.py)."""
    labels = short_labels(setups)
    for row, setup in zip(rows, setups):
        trial_costs = [costs.trials[t.key] for t in setup.trials]
        # Alone on the endpoint: a self-hosted trial's sole cost, a hosted one's own cost.
        alone = [c.cost_usd if c.sole_usd is None else c.sole_usd for c in trial_costs]
        solved, bounds = row["solved_tasks"], intervals[setup.name]
        row.update({
            "label": labels[setup.name], "status": setup.status, "trials_expected": setup.trials_expected,
            "sole_cost_usd": None if any(v is None for v in alone) else money(sum(alone, Decimal(0))),
            "tokens_in_per_solved": round(row["tokens_in"] / solved) if solved else None,
            "tokens_out_per_solved": round(row["tokens_out"] / solved) if solved else None,
            **{f"{figure}_{end}": bounds[figure][end] for figure in ("pass_at_1", "solved_rate") for end in ("low", "high")},
            "cost_per_solved_low_usd": bounds["cost_per_solved_usd"]["low"],
            "cost_per_solved_high_usd": bounds["cost_per_solved_usd"]["high"],
        })


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
