"""pass^k beside pass@k, each with its 95 % Wilson interval over the tasks with a verdict (report/intervals.py).

pass@k asks whether a task is solved at least once in k attempts (capability); pass^k whether all k attempts pass
(reliability: tau-bench's pass^k, inspect_ai's pass_k reducer). Both come from the one scoring module
(core/scoring.py: pass_at_k, pass_hat_k); here they get their intervals, n being the tasks they are averaged over."""

from __future__ import annotations

from typing import Any

from agentcompass.report.intervals import wilson

COLUMNS = ("pass_at_k_low", "pass_at_k_high", "pass_hat_k", "pass_hat_k_low", "pass_hat_k_high")


def add_reliability(rows: list[dict[str, Any]]) -> None:
    """Each setup row (with pass@k and pass^k from the scoring module) gets their intervals."""
    for row in rows:
        n = int(row.get("pass_at_k_tasks") or 0)
        for figure in ("pass_at_k", "pass_hat_k"):
            rate = row.get(figure)
            found = None if rate is None else wilson(rate, n)
            row[f"{figure}_low"], row[f"{figure}_high"] = (round(found[0], 6), round(found[1], 6)) if found else (None, None)
