"""The report's tables as rows of plain values: per setup, per trial, per task (difficulty)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from agentcompass.report.bill import seconds
from agentcompass.report.concurrency import concurrency
from agentcompass.report.costs import Costs
from agentcompass.report.flags import SETUP_FLAG_COLUMNS, TRIAL_FLAG_COLUMNS
from agentcompass.report.load import Setup, Trial
from agentcompass.report.split import MICRO
from agentcompass.report.stats import TaskTally
from agentcompass.core.scoring import summarize, verdict

SETUP_COLUMNS = [
    "setup", "label", "benchmark", "harness", "model", "reasoning", "env", "status", "k", "tasks", "attempts",
    "trials_expected", "passed", "failed", "errors", "incomplete", "not_run", "complete", "scoring_rule", "tampering",
    "pass_at_1", "pass_at_1_low", "pass_at_1_high", "pass_at_1_tasks", "pass_at_k", "pass_at_k_tasks",
    "solved_tasks", "solved_rate", "solved_rate_low", "solved_rate_high", "total_cost_usd", "sole_cost_usd",
    "cost_per_solved_usd", "cost_per_solved_low_usd", "cost_per_solved_high_usd", "cost_per_passing_attempt_usd",
    "avg_cost_per_attempt_usd", "cost_basis", "tokens_in", "tokens_out", "tokens_cached", "tokens_in_per_solved",
    "tokens_out_per_solved", "steps", "orchestration_s", "session_s", "generation_s",
    # added by issue 32 (after the others, so readers by name and by position both keep working):
    "retry_cost_usd", "interrupted_attempts", "reported_cost_usd", "cost_difference_pct",
    # added by issue 36 (the count cannot be gamed): attempts failed for evidence the agent attacked the verdict or count
    "tampered",
    # added by issue 41 (a page to publish): when the setup ran, and how many of its attempts ran at once
    "first_started_at", "last_finished_at", "peak_concurrency", "avg_concurrency",
    # added by issue 42: pass^k (all k attempts pass) beside pass@k, both with their intervals (report/reliability.py)
    "pass_hat_k", "pass_hat_k_low", "pass_hat_k_high", "pass_at_k_low", "pass_at_k_high",
    # added by issue 38 (empty for a setup `agentcompass analyze` never read): flagged attempts, rates with them failed
    *SETUP_FLAG_COLUMNS,
]
# The scoring module's figures a setup row takes as they are (incomplete_by_category: report.json only).
SUMMARY_FIELDS = ("passed", "failed", "errors", "incomplete", "incomplete_by_category", "not_run", "complete",
                  "scoring_rule", "tampering", "tampered", "pass_at_1", "pass_at_1_tasks", "pass_at_k", "pass_at_k_tasks",
                  "solved_tasks", "solved_rate", "pass_hat_k")
TASK_COLUMNS = ["task_id", "setup", "attempts", "graded", "passed", "cost_usd"]
PAIR_COLUMNS = ["a", "b", "tasks", *[f"{figure}_{part}" for figure in ("pass_at_1", "solved_rate", "cost_per_solved_usd")
                                     for part in ("diff", "low", "high", "differs")]]
TRIAL_COLUMNS = [
    "setup", "task_id", "attempt", "status", "error_category", "reward", "cost_usd", "sole_cost_usd", "cost_basis",
    "steps", "tokens_in", "tokens_out", "tokens_cached", "orchestration_s", "session_s", "generation_s",
    "started_at", "finished_at",
    "retries", "retry_cost_usd", "reported_cost_usd", "cost_difference_pct",
    *TRIAL_FLAG_COLUMNS,  # issue 38: the attempt's analysis flags and failure mode
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
    """Per selected task: attempts, graded (a verdict by the setup's scoring rule), passed, and what its recorded
    attempts cost (their retried tries included); a task never run is a tally of nothing."""
    by_task: dict[str, list[Trial]] = {task_id: [] for task_id in setup.task_ids}
    for trial in setup.trials:
        by_task.setdefault(trial.result.task_id, []).append(trial)
    tallies = []
    for task_id, trials in sorted(by_task.items()):
        task_costs = [costs.trials[t.key].cost_usd for t in trials]
        verdicts = [verdict(t.result, setup.rule) for t in trials]  # the scoring module's: what counts as graded
        known = all(c is not None for c in task_costs)
        tallies.append(TaskTally(
            task_id, len(trials), sum(v is not None for v in verdicts), sum(v is True for v in verdicts),
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
        summary = summarize(results, setup.task_ids, setup.k, setup.rule, setup.unrecorded_usage())
        interrupted = costs.unrecorded.get(setup.name)
        trial_costs = [costs.trials[t.key] for t in setup.trials] + ([interrupted] if setup.unrecorded and interrupted else [])
        total = total_of([c.cost_usd for c in trial_costs])
        reported = [c.reported_usd for c in trial_costs if c.basis.startswith("per-token")]
        ours = total_of([c.cost_usd for c in trial_costs if c.basis.startswith("per-token")])
        bases = sorted({c.basis for c in trial_costs})
        rows.append({
            "setup": setup.name, "benchmark": setup.labels.get("benchmark"), "harness": setup.labels.get("harness"),
            "model": setup.model.get("name"), "reasoning": setup.model.get("reasoning"), "env": setup.labels.get("env"),
            "k": setup.k, "tasks": summary["tasks"], "attempts": len(results),
            **{f: summary[f] for f in SUMMARY_FIELDS},
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


def add_setup_figures(rows: list[dict[str, Any]], setups: list[Setup], costs: Costs,
                      intervals: dict[str, dict[str, Any]]) -> None:
    """The page's figures beside setup_rows' own: the short label, the run's status, the cost alone on
    the endpoint, tokens per solved task and the 95 % intervals (report/stats.py)."""
    labels = short_labels(setups)
    for row, setup in zip(rows, setups):
        interrupted = costs.unrecorded.get(setup.name)
        trial_costs = [costs.trials[t.key] for t in setup.trials] + ([interrupted] if setup.unrecorded and interrupted else [])
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
            **run_window(setup),
        })


def run_window(setup: Setup) -> dict[str, Any]:
    """When the setup's attempts ran (first start, last end, as recorded) and how many ran at once."""
    results = [t.result for t in setup.trials]
    peak, average = concurrency((seconds(r.started_at), seconds(r.finished_at)) for r in results)
    return {"first_started_at": min((r.started_at for r in results), key=seconds, default=None),
            "last_finished_at": max((r.finished_at for r in results), key=seconds, default=None),
            "peak_concurrency": peak, "avg_concurrency": average}


def difficulty_rows(setups: list[Setup]) -> list[dict[str, Any]]:
    """Per task: pass rate per setup (passed / graded attempts) and overall; hardest first."""
    tasks = sorted({t.result.task_id for s in setups for t in s.trials})
    rows = []
    for task in tasks:
        row: dict[str, Any] = {"task_id": task}
        passed = graded = 0
        for setup in setups:
            verdicts = [v for t in setup.trials
                        if t.result.task_id == task and (v := verdict(t.result, setup.rule)) is not None]
            row[setup.name] = round(sum(verdicts) / len(verdicts), 6) if verdicts else None
            passed, graded = passed + sum(verdicts), graded + len(verdicts)
        row["overall"] = round(passed / graded, 6) if graded else None
        rows.append(row)
    return sorted(rows, key=lambda r: (r["overall"] is None, r["overall"] if r["overall"] is not None else 0, r["task_id"]))
