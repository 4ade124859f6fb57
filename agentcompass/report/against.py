"""`report --against SUMMARY.csv`: every figure of a published summary (the Coding Agent Cost
Benchmark's summary.csv) set beside the report's own, each difference outside rounding named.

Rounding: a count agrees when equal; a percentage when it rounds to the published one (half a unit of
its last digit); a dollar figure when it agrees to the cent (the published figures carry four decimals
computed from unrounded per-run costs, so ours, summed from the per-run figures, may differ below $0.005)."""

from __future__ import annotations

import csv
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Callable

from agentcompass.core.errors import UserError

CENT = Decimal("0.005")  # half a cent: two figures that agree to the cent


def pct(value: Any) -> Decimal | None:
    return None if value is None else Decimal(str(value)) * 100


def usd(value: Any) -> Decimal | None:
    return None if value is None else Decimal(str(value))


# published column -> (the report's setup-row figure as a Decimal, kind)
FIGURES: dict[str, tuple[Callable[[dict[str, Any]], Decimal | None], str]] = {
    "runs": (lambda r: Decimal(r["attempts"]), "count"),
    "pass_runs": (lambda r: Decimal(r["passed"]), "count"),
    "run_pass_rate_pct": (lambda r: pct(r["pass_at_1"]), "pct"),
    "tasks_solved": (lambda r: Decimal(r["solved_tasks"]), "count"),
    "tasks_total": (lambda r: Decimal(r["tasks"]), "count"),
    "task_pass_rate_pct": (lambda r: pct(r["solved_rate"]), "pct"),
    "total_usd": (lambda r: usd(r["total_cost_usd"]), "usd"),
    "avg_usd_per_run": (lambda r: usd(r["avg_cost_per_attempt_usd"]), "usd"),
    "usd_per_pass_run": (lambda r: usd(r["cost_per_passing_attempt_usd"]), "usd"),
    "usd_per_task_solved": (lambda r: usd(r["cost_per_solved_usd"]), "usd"),
    "total_sole_usd": (lambda r: usd(r["sole_cost_usd"]), "usd"),
}


def read_published(path: Path) -> list[dict[str, str]]:
    try:
        rows = list(csv.DictReader(path.open(encoding="utf-8", newline="")))
    except OSError as exc:
        raise UserError(f"--against {path}: cannot read it ({exc.strerror}); pass the study's summary.csv") from None
    if not rows or "setup" not in rows[0]:
        raise UserError(f"--against {path}: not a published summary (no 'setup' column); pass the study's summary.csv, "
                        f"with columns setup and any of {', '.join(FIGURES)}")
    return rows


def matching_row(setup: str, rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The report's row for a published setup: by its directory name, or the model label in it
    (benchmark__harness__MODEL__env, as `agentcompass import cost-bench` names them)."""
    for row in rows:
        parts = str(row["setup"]).split("__")
        if setup in (row["setup"], row.get("label"), parts[2] if len(parts) == 4 else None):
            return row
    return None


def agrees(kind: str, ours: Decimal, published: Decimal, places: int) -> bool:
    if kind == "count":
        return ours == published
    if kind == "pct":
        return abs(ours - published) <= Decimal(5) / Decimal(10) ** (places + 1)
    return abs(ours - published) < CENT


def compare(report_rows: list[dict[str, Any]], path: Path) -> list[str]:
    """One line per published figure ours differs from (beyond rounding), or that we lack."""
    differences = []
    for published in read_published(path):
        setup = published["setup"]
        row = matching_row(setup, report_rows)
        if row is None:
            differences.append(f"{setup}: in {path.name}, not among the report's setups "
                               f"({', '.join(str(r['setup']) for r in report_rows)})")
            continue
        for column, (figure, kind) in FIGURES.items():
            text = (published.get(column) or "").strip()
            if not text:
                continue
            try:
                theirs = Decimal(text)
            except InvalidOperation:
                differences.append(f"{setup} {column}: published {text!r} is not a number")
                continue
            ours = figure(row)
            places = max(0, -theirs.as_tuple().exponent) if isinstance(theirs.as_tuple().exponent, int) else 0
            if ours is None:
                differences.append(f"{setup} {column}: published {text}, ours unknown")
            elif not agrees(kind, ours, theirs, places):
                shown = f"{ours:.{max(places, 2)}f}" if kind != "count" else str(ours)
                differences.append(f"{setup} {column}: published {text}, ours {shown} (difference {ours - theirs:+.4f})")
    return differences
