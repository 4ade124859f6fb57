"""Build the report from results directories and write its files (atomically)."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

from agentcompass.report.costs import Costs, EndpointPricing, Group, assign
from agentcompass.report.flags import add_flag_figures, add_trial_flags
from agentcompass.report.load import Setup
from agentcompass.report.regraded import regrade_pairs
from agentcompass.report.reliability import add_reliability
from agentcompass.report.stats import METHOD, analyse
from agentcompass.report.tables import (PAIR_COLUMNS, SETUP_COLUMNS, TASK_COLUMNS, TRIAL_COLUMNS, add_setup_figures,
                                        cost_outside, difficulty_rows, money, pair_rows, setup_rows, task_rows,
                                        task_tallies, trial_rows)
from agentcompass.core.results import now_iso, write_atomic
from agentcompass.core.scoring import incomplete_note, rate

CSV_FILES = ("summary.csv", "per_trial.csv", "per_task.csv", "task_difficulty.csv", "paired_differences.csv")


@dataclass
class Pricing:
    """What prices each self-hosted endpoint, from the flags (or, when verifying, as recorded);
    an endpoint not named here uses its preset's pricing.hourly_usd."""

    endpoints: dict[str, EndpointPricing] = field(default_factory=dict)


def describe(group: Group) -> str:
    pricing = group.pricing
    if pricing is None:
        return f"{group.endpoint}: no rate or bill (cost unknown)"
    if pricing.bill is not None:
        return f"{group.endpoint}: the bill ({pricing.source}) over the jobs' window, split by concurrency"
    return f"{group.endpoint}: ${pricing.hourly_usd}/h split by concurrency (an estimate)"


def pricing_record(costs: Costs) -> dict[str, Any]:
    groups = [{"endpoint": g.endpoint, "setups": g.setups, "hourly_usd": g.pricing.hourly_usd if g.pricing else None,
               "bill": g.pricing.source if g.pricing else None, "description": describe(g)} for g in costs.groups]
    parts = [describe(g) for g in costs.groups] + ["hosted models: tokens x the model's per-token prices"]
    rates = {g["hourly_usd"] for g in groups}
    return {"hourly_usd": rates.pop() if len(rates) == 1 else None,
            "bill": ", ".join(g["bill"] for g in groups if g["bill"]) or None,
            "description": "; ".join(parts),
            "estimate": any(g.pricing is None or g.pricing.bill is None for g in costs.groups),
            "groups": groups}


def build(setups: list[Setup], pricing: Pricing) -> dict[str, Any]:
    costs = assign(setups, pricing.endpoints)
    rows = setup_rows(setups, costs)
    tallies = {s.name: task_tallies(s, costs) for s in setups}
    analysis = analyse(tallies, {row["setup"]: cost_outside(row, tallies[row["setup"]]) for row in rows})
    add_setup_figures(rows, setups, costs, analysis["setups"])
    add_reliability(rows)
    add_flag_figures(rows, setups)
    trials = trial_rows(setups, costs)
    add_trial_flags(trials, setups)
    return {
        "generated_at": now_iso(),
        "banners": banners(rows),
        "inputs": [str(s.dir) for s in setups],
        "pricing": pricing_record(costs),
        "statistics": {**METHOD, "pairs": analysis["pairs"]},
        "setups": rows,
        "trials": trials,
        "tasks": task_rows(setups, tallies),
        "task_difficulty": difficulty_rows(setups),
        "billing": billing(costs),
        "regrades": regrade_pairs(setups),
    }


def banners(rows: list[dict[str, Any]]) -> list[str]:
    """One line per setup whose figures are not final: a run not completed, attempts without a verdict, tampering."""
    lines = []
    for row in rows:
        if row["status"] != "completed":
            lines.append(f"{row['setup']}: the run is {row['status']}, not completed; its rates are over the "
                         f"{row['pass_at_1_tasks']} of {row['tasks']} selected tasks with a verdict so far")
        elif not row["complete"]:
            lines.append(f"{row['setup']}: {incomplete_note(row).removeprefix(' · ')}; its rates are over the "
                         f"{row['pass_at_1_tasks']} of {row['tasks']} selected tasks with a verdict")
        if row["tampering"]:
            lines.append(f"{row['setup']}: in {row['tampering']} attempt(s) the agent wrote where the verifier reads "
                         f"(details.tampering); the verifier ran on fresh inputs")
        if row.get("tampered"):
            lines.append(f"{row['setup']}: {row['tampered']} attempt(s) failed for evidence that the agent attacked its "
                         f"verdict or the count (details.tampered); they stay in the rates' base")
        if row.get("passed_flagged"):
            lines.append(f"{row['setup']}: {row['passed_flagged']} passing attempt(s) flagged by agentcompass analyze; "
                         f"with them scored as failures pass@1 is {rate(row['pass_at_1_flagged_as_failed'])} and "
                         f"{row['solved_tasks_not_flagged']} task(s) are solved (per_trial.csv names the flags)")
    return lines


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat()


def billing(costs: Costs) -> dict[str, Any] | None:
    """Every billed endpoint: its jobs' window, each interval's cost, covered seconds and billed part,
    what the trials were charged and what no trial generated in (billing.json; its headline in report.json)."""
    groups = [group_billing(g, costs) for g in costs.groups if g.pricing is not None and g.pricing.bill is not None]
    if not groups:
        return None
    total = {f: money(sum((Decimal(g[f]) for g in groups), Decimal(0)))
             for f in ("bill_usd", "outside_window_usd", "billed_usd", "split_usd", "unattributed_usd")}
    return {"source": ", ".join(str(g["source"]) for g in groups), **total,
            "uncovered_s": round(sum(g["uncovered_s"] for g in groups), 6), "groups": groups}


def group_billing(group: Group, costs: Costs) -> dict[str, Any]:
    split, covered, pricing = group.split, group.covered or [], group.pricing
    assert split is not None and pricing is not None
    intervals = [{"start": iso(c.bucket.start), "end": iso(c.bucket.end), "cost_usd": str(c.bucket.cost),
                  "covered_s": round(c.covered_s, 6), "billed_usd": money(c.billed),
                  "generation_s": round(row["generation_union_s"], 6), "trials": row["trials"],
                  "attributed_usd": money(attributed), "unattributed_usd": money(c.billed - attributed)}
                 for c, row, attributed in zip(covered, split.buckets, split.attributed)]
    bill = sum((c.bucket.cost for c in covered), Decimal(0))
    covered_s = sum(c.covered_s for c in covered)
    uncovered = sorted({key[0] for key, seconds in split.uncovered.items() if seconds > 0})
    start, end, window_s = group.window or (None, None, 0.0)
    return {
        "endpoint": group.endpoint, "setups": group.setups, "source": pricing.source,
        "window_start": None if start is None else iso(start), "window_end": None if end is None else iso(end),
        "window_s": round(window_s, 6), "covered_s": round(covered_s, 6),
        # what an hour of the window cost, as the benchmark's effective_hourly: billed / covered hours
        "effective_hourly_usd": money(split.billed_usd * 3600 / Decimal(str(covered_s))) if covered_s else None,
        "bill_usd": money(bill), "billed_usd": money(split.billed_usd),
        "outside_window_usd": money(bill - split.billed_usd),
        "split_usd": money(split.billed_usd - split.unattributed_usd), "unattributed_usd": money(split.unattributed_usd),
        "uncovered_s": round(split.uncovered_s, 6), "uncovered_setups": uncovered,
        "intervals": intervals, "rows": pricing.rows,
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
    """billing.json without each interval and raw row: what report.json carries."""
    if billing_info is None:
        return None
    return billing_info | {"groups": [{k: v for k, v in g.items() if k not in ("intervals", "rows")}
                                      for g in billing_info["groups"]]}


def write(report: dict[str, Any], out: Path) -> Path | None:
    """Every file of the report; the page only with plotly (the `report` extra): None without it."""
    from agentcompass.core.registry import installed

    for name, text in file_texts(report).items():
        write_atomic(out / name, text)
    if not installed("plotly"):
        return None
    from agentcompass.report.page import render

    from agentcompass.view.live import link_to

    viewer = {row["setup"]: url for row, path in zip(report["setups"], report["inputs"]) if (url := link_to(Path(path)))}
    write_atomic(out / "report.html", render(report, viewer))
    return out / "report.html"

