"""Build the report from results directories and write its files (atomically)."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from agentcompass.report.costs import Costs, assign
from agentcompass.report.load import Setup
from agentcompass.report.split import Bucket
from agentcompass.report.stats import METHOD, analyse
from agentcompass.report.tables import (PAIR_COLUMNS, SETUP_COLUMNS, TASK_COLUMNS, TRIAL_COLUMNS, add_setup_figures,
                                        cost_outside, difficulty_rows, money, pair_rows, setup_rows, task_rows,
                                        task_tallies, trial_rows)
from agentcompass.results import now_iso, write_atomic

CSV_FILES = ("summary.csv", "per_trial.csv", "per_task.csv", "task_difficulty.csv", "paired_differences.csv")


@dataclass
class Pricing:
    hourly_usd: float | None = None
    bill_source: str | None = None  # a file path, or "modal"
    bill: list[Bucket] | None = None
    bill_rows: list[dict[str, Any]] | None = None  # what Modal returned, kept for the record

    def describe(self) -> str:
        if self.bill is not None:
            return f"self-hosted endpoints split by concurrency from the bill ({self.bill_source}); hosted models per token"
        if self.hourly_usd is not None:
            return f"self-hosted endpoints at ${self.hourly_usd}/h split by concurrency (an estimate); hosted models per token"
        return "self-hosted endpoints at their preset's pricing.hourly_usd split by concurrency (an estimate); hosted models per token"


def build(setups: list[Setup], pricing: Pricing) -> dict[str, Any]:
    costs = assign(setups, pricing.hourly_usd, pricing.bill)
    rows = setup_rows(setups, costs)
    tallies = {s.name: task_tallies(s, costs) for s in setups}
    analysis = analyse(tallies, {row["setup"]: cost_outside(row, tallies[row["setup"]]) for row in rows})
    add_setup_figures(rows, setups, costs, analysis["setups"])
    return {
        "generated_at": now_iso(),
        "inputs": [str(s.dir) for s in setups],
        "pricing": {"hourly_usd": pricing.hourly_usd, "bill": pricing.bill_source, "description": pricing.describe(),
                    "estimate": pricing.bill is None},
        "statistics": {**METHOD, "pairs": analysis["pairs"]},
        "setups": rows,
        "trials": trial_rows(setups, costs),
        "tasks": task_rows(setups, tallies),
        "task_difficulty": difficulty_rows(setups),
        "billing": billing(costs, pricing),
    }


def billing(costs: Costs, pricing: Pricing) -> dict[str, Any] | None:
    """The bill, its buckets and how it was split: billing.json (and its headline in report.json)."""
    split = costs.bill_split
    if pricing.bill is None:
        return None
    billed = sum((b.cost for b in pricing.bill), Decimal(0))
    shared = sum(split.shares.values(), Decimal(0)) if split else Decimal(0)
    return {
        "source": pricing.bill_source,
        "billed_usd": money(billed),
        "split_usd": money(shared),
        "unattributed_usd": money(split.unattributed_usd if split else billed),
        "uncovered_s": round(split.uncovered_s, 6) if split else 0.0,
        "buckets": [{"start": b.start, "end": b.end, "cost_usd": str(b.cost)} for b in pricing.bill],
        "rows": pricing.bill_rows,
    }


def csv_text(rows: list[dict[str, Any]], columns: list[str]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({c: "" if row.get(c) is None else row[c] for c in columns})
    return out.getvalue()


def file_texts(report: dict[str, Any]) -> dict[str, str]:
    """Every file of the report but the page, as text."""
    difficulty_columns = ["task_id", *[s["setup"] for s in report["setups"]], "overall"]
    texts = {
        "summary.csv": csv_text(report["setups"], SETUP_COLUMNS),
        "per_trial.csv": csv_text(report["trials"], TRIAL_COLUMNS),
        "per_task.csv": csv_text(report["tasks"], TASK_COLUMNS),
        "task_difficulty.csv": csv_text(report["task_difficulty"], difficulty_columns),
        "paired_differences.csv": csv_text(pair_rows(report["statistics"]["pairs"]), PAIR_COLUMNS),
        "report.json": json.dumps({k: v for k, v in report.items() if k != "billing"}
                                  | {"billing": headline(report["billing"])}, indent=2) + "\n",
    }
    if report["billing"] is not None:
        texts["billing.json"] = json.dumps(report["billing"], indent=2) + "\n"
    return texts


def headline(billing_info: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if billing_info is None else {k: v for k, v in billing_info.items() if k not in ("buckets", "rows")}


def write(report: dict[str, Any], out: Path) -> Path:
    from agentcompass.report.page import render

    page = render(report)  # first: a missing plotly fails before anything is written
    for name, text in file_texts(report).items():
        write_atomic(out / name, text)
    write_atomic(out / "report.html", page)
    return out / "report.html"

