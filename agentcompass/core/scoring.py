"""The one definition of every rate: which attempts have a verdict, what each rate is over.

`run`'s summary line, summary.json, sweep.json, `report` and `report --verify` all call `summarize`;
nothing else computes a rate. An attempt has a verdict when it passed or failed; an error is a failed
attempt unless the benchmark's rule says the official harness leaves that kind out (then it is
*incomplete*). A task's pass@k is the unbiased estimator over its attempts with a verdict; pass@k is
the mean over the selected tasks that have at least one (its base, printed beside it); the solved rate
is over the whole selection. Attempts without a verdict, and attempts not run yet, are counted and
printed next to every rate, and make the run `complete: false`.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import comb
from typing import TYPE_CHECKING, Any, Iterable

from agentcompass.core.task import Usage

if TYPE_CHECKING:
    from agentcompass.core.results import TrialResult

ERROR_CATEGORIES = ("agent", "verifier", "infra")


@dataclass(frozen=True)
class Rule:
    """Which error categories are failed attempts (the rest have no verdict), and where the rule comes from."""

    name: str
    fails: frozenset[str]
    source: str
    says: str


RULES = {rule.name: rule for rule in (
    Rule("errors_fail", frozenset({"agent", "verifier"}),
         "minisweagent/run/benchmarks/swebench.py (a crashed agent's instance is an empty, unresolved patch)",
         "agent and verifier errors are failed attempts; infra errors that exhausted their retries have no verdict"),
    Rule("every_attempt", frozenset(ERROR_CATEGORIES),
         "terminal_bench/harness/models.py (accuracy: resolved over all trials); "
         "swebench/harness/reporting.py (resolved over the selected instances)",
         "every attempt counts: an error of any kind is a failed attempt"),
    Rule("valid_reward", frozenset(),
         "harbor/models/trial/error_policy.py (has_valid_reward) and harbor/job.py (metrics over trials with a valid reward)",
         "an attempt is in the base when it has a valid reward: the agent errors whose reward counts (a time-out, a "
         "non-zero exit, ...) are graded, so passed or failed; an error is an attempt without a valid reward (a refused "
         "key or request, a verifier time-out, no reward file, an outage) and has no verdict, as Harbor leaves it out "
         "of its mean"),
    Rule("errors_excluded", frozenset(),
         "run.count_errors_as_failures=false", "no error is a verdict: every errored attempt is left out"),
)}
DEFAULT_RULE = "errors_fail"


def rule_for(recipe_rule: str | None, count_errors_as_failures: bool | None) -> Rule:
    """The recipe's rule, unless run.count_errors_as_failures overrides it (true: every error fails; false: none does)."""
    if count_errors_as_failures is True:
        return RULES["every_attempt"]
    if count_errors_as_failures is False:
        return RULES["errors_excluded"]
    return RULES[recipe_rule or DEFAULT_RULE]


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimator of Chen et al. (2021): 1 - C(n-c, k) / C(n, k); with n < k, k is n."""
    if n == 0:
        return 0.0
    k = min(k, n)
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k, the chance that k attempts drawn without replacement from n all pass (tau-bench's estimator, the
    reliability inspect_ai's pass_k reducer reports): C(c, k) / C(n, k); with n < k, k is n, as for pass@k."""
    if n == 0:
        return 0.0
    k = min(k, n)
    return comb(c, k) / comb(n, k)


def verdict(result: "TrialResult", rule: Rule) -> bool | None:
    """True passed, False failed, None no verdict (an error the rule leaves out)."""
    if result.status == "error":
        return False if (result.error_category or "infra") in rule.fails else None
    return result.status == "passed"


def summarize(results: Iterable["TrialResult"], task_ids: list[str], k: int, rule: Rule,
              extra_usage: Usage | None = None) -> dict[str, Any]:
    """The rates, counts and totals of the attempts 1..k of the selected tasks (docs/scoring.md defines each).
    `extra_usage`: what tries without a record spent (interrupted, superseded): in the totals, never in a rate.
    One pass over the trials: it runs at every checkpoint of a run of thousands."""
    tally = {t: [0, 0, 0] for t in task_ids}  # per task: attempts recorded, with a verdict, passed
    usages: list[Usage] = []
    failed = errors_failed = tampered = forced_failed = 0
    errors: dict[str, int] = {}
    incomplete: dict[str, int] = {}
    fails = rule.fails
    for r in results:
        counts = tally.get(r.task_id)
        if counts is None or not 1 <= r.attempt <= k:
            continue
        usages.append(r.usage)
        counts[0] += 1
        tampered += "tampering" in r.details
        forced_failed += "tampered" in r.details
        if r.status == "error":
            category = r.error_category or "infra"
            errors[category] = errors.get(category, 0) + 1
            if category in fails:
                counts[1] += 1
                failed += 1
                errors_failed += 1
            else:
                incomplete[category] = incomplete.get(category, 0) + 1
        else:
            counts[1] += 1
            passed = r.status == "passed"
            counts[2] += passed
            failed += not passed
    scored = [(graded, passed) for _, graded, passed in tally.values() if graded]

    def pass_at(kk: int) -> float | None:
        return round(sum(pass_at_k(graded, passed, kk) for graded, passed in scored) / len(scored), 6) if scored else None

    pass_hat = round(sum(pass_hat_k(graded, passed, k) for graded, passed in scored) / len(scored), 6) if scored else None

    trials = sum(count for count, _, _ in tally.values())
    attempted = sum(count > 0 for count, _, _ in tally.values())
    solved = sum(passed > 0 for _, _, passed in tally.values())
    expected = len(task_ids) * k
    not_run = expected - trials
    usage = Usage.total(usages)
    if extra_usage is not None:
        usage = usage + extra_usage
    cost = round(usage.cost_usd, 6) if usage.cost_known else None
    return {
        "tasks": len(task_ids),
        "tasks_attempted": attempted,
        "tasks_unattempted": len(task_ids) - attempted,
        "k": k,
        "trials_expected": expected,
        "trials": trials,
        "passed": sum(passed for _, _, passed in tally.values()),
        "failed": failed,
        "errors": sum(errors.values()),
        "errors_by_category": errors,
        "errors_failed": errors_failed,
        "incomplete": sum(incomplete.values()),
        "incomplete_by_category": incomplete,
        "not_run": not_run,
        "complete": not incomplete and not_run == 0,
        "tampering": tampered,
        "tampered": forced_failed,
        "scoring_rule": rule.name,
        "pass_at_1": pass_at(1),
        "pass_at_1_tasks": len(scored),
        "pass_at_k": pass_at(k),
        "pass_at_k_tasks": len(scored),
        "pass_hat_k": pass_hat,  # every one of k attempts passes (docs/scoring.md)
        "solved_tasks": solved,
        "solved_rate": round(solved / len(task_ids), 6) if task_ids else None,
        "cost_usd": cost,
        "cost_known": usage.cost_known,
        "cost_per_solved_usd": round(cost / solved, 6) if solved and cost is not None else None,
        **cli_cost(usage),
        "model_calls": usage.model_calls,
        "tokens_in": usage.tokens_in,
        "tokens_out": usage.tokens_out,
        "tokens_cached": usage.tokens_cached,
        "tokens_cache_write": usage.tokens_cache_write,
        "generation_s": round(usage.generation_s, 3),
    }


def cli_cost(usage: Usage) -> dict[str, Any]:
    """An installed CLI's own cost figure beside the priced one, and how far apart they are (only when it gave one)."""
    if usage.cli_cost_usd is None:
        return {}
    return {"cli_cost_usd": round(usage.cli_cost_usd, 6), "cli_cost_difference_usd": round(usage.cli_cost_usd - usage.cost_usd, 6)}


def rate(value: float | None) -> str:
    """A rate for display: n/a when no task has a verdict yet."""
    return "n/a" if value is None else f"{value:.3f}"


def base_note(summary: dict[str, Any]) -> str:
    """What a rate is over and what it leaves out: `over 500 tasks · 3 attempts incomplete (infra)`."""
    tasks, base = summary["tasks"], summary["pass_at_1_tasks"]
    text = f"over {base} tasks" if base == tasks else f"over {base} of {tasks} tasks"
    return text + incomplete_note(summary)


def incomplete_note(summary: dict[str, Any]) -> str:
    """` · 3 attempts incomplete (infra) · 4 not run`, or nothing for a complete run."""
    parts = []
    if summary.get("incomplete"):
        kinds = ", ".join(f"{n} {c}" if len(summary["incomplete_by_category"]) > 1 else c
                          for c, n in sorted(summary["incomplete_by_category"].items()))
        parts.append(f"{summary['incomplete']} attempt{'s' if summary['incomplete'] != 1 else ''} incomplete ({kinds})")
    if summary.get("not_run"):
        parts.append(f"{summary['not_run']} not run")
    return "".join(f" · {p}" for p in parts)


def usd(value: float | str | None) -> str:
    """Money for display; unknown is never $0."""
    return "unknown" if value is None else f"${float(value):.4f}"
