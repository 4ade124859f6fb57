"""The report's analysis columns, where `agentcompass analyze` wrote analysis.jsonl: per attempt its flags and
failure mode; per setup how many attempts were flagged, and the rates and cost per solved task with every
flagged pass scored as a failure, beside the graded ones (which stay as graded). A setup never analysed has
empty columns: unknown, never "no flag"."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from agentcompass.analyze.rescore import failure_name, flag_names, flagged_counts, read_analysis, rescored_results
from agentcompass.core.scoring import summarize
from agentcompass.report.load import Setup

SETUP_FLAG_COLUMNS = ["analysed", "flagged", "passed_flagged", "pass_at_1_flagged_as_failed",
                      "solved_tasks_not_flagged", "solved_rate_flagged_as_failed", "cost_per_solved_not_flagged_usd"]
TRIAL_FLAG_COLUMNS = ["flags", "failure_mode"]


def add_flag_figures(rows: list[dict[str, Any]], setups: list[Setup]) -> None:
    """Each setup row's analysis figures (rows and setups in the same order, as setup_rows makes them)."""
    for row, setup in zip(rows, setups):
        analysis = read_analysis(setup.dir)
        if not analysis:
            row.update(dict.fromkeys(SETUP_FLAG_COLUMNS), analysed=False)
            continue
        results = [t.result for t in setup.trials]
        rescored = summarize(rescored_results(results, analysis), setup.task_ids, setup.k, setup.rule)
        solved = rescored["solved_tasks"]
        total = row.get("total_cost_usd")
        row.update(flagged_counts(results, analysis), analysed=True,
                   pass_at_1_flagged_as_failed=rescored["pass_at_1"], solved_tasks_not_flagged=solved,
                   solved_rate_flagged_as_failed=rescored["solved_rate"],
                   cost_per_solved_not_flagged_usd=None if total is None or not solved
                   else str((Decimal(total) / solved).quantize(Decimal("0.000001"))))


def add_trial_flags(rows: list[dict[str, Any]], setups: list[Setup]) -> None:
    """Each attempt row's flags (detector names, `;`-joined) and failure mode; empty where never analysed."""
    by_setup = {s.name: read_analysis(s.dir) for s in setups}
    for row in rows:
        analysis = by_setup.get(row["setup"]) or {}
        found = analysis.get((row["task_id"], row["attempt"]))
        row["flags"] = ";".join(flag_names(found)) if found is not None else None
        row["failure_mode"] = failure_name(found)


def flagged_banner(setups: list[dict[str, Any]]) -> str | None:
    """The page's note on analysed setups with flagged passes: solved beside solved-not-flagged, and the cost
    per solved task for both (HTML; None when no analysed setup has a flagged pass)."""
    from html import escape

    items = "".join(
        f"<li><b>{escape(str(s.get('label') or s['setup']))}</b>: {s['passed_flagged']} flagged pass(es); solved "
        f"{s['solved_tasks']} / {s['tasks']}, not flagged {s['solved_tasks_not_flagged']} / {s['tasks']}; $ per solved "
        f"task {s['cost_per_solved_usd'] or 'n/a'}, not flagged {s['cost_per_solved_not_flagged_usd'] or 'n/a'}</li>"
        for s in setups if s.get("passed_flagged"))
    if not items:
        return None
    return (f'<div class="banner flagged" id="banner-flagged"><b>Flagged by agentcompass analyze</b>: passes that may '
            f"not be real solves (per_trial.csv names the flags; the rates above count them as graded).<ul>{items}</ul></div>")
