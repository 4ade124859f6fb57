"""A finished run's own cost of self-hosted trials, split as the report splits it.

Each self-hosted trial's meter charges it its own generation time (its sole cost); trials that generate
at once share the endpoint, so the sum of sole costs overstates the run's cost. At the end of a run (or
of a pooled sweep, whose runs share one endpoint) the runner asks this module for the report's split of
those runs together, and its summary line, summary.json and sweep.json show that figure: the same
money `agentcompass report` shows, to the micro-dollar. Reads results only, as the rest of report/.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

from agentcompass.core.results import write_json


def self_hosted(run_dir: Path) -> bool:
    """Whether the run's model is billed by the hour (read from run.json, before any trial is)."""
    try:
        model = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))["config"]["model"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    from agentcompass.report.load import Setup

    return Setup("", run_dir, {}, dict(model or {}), 1).self_hosted


def settle(summaries: dict[Path, dict[str, Any]]) -> None:
    """Replace the self-hosted runs' costs in these summaries (by run dir) with the report's split, in place,
    and rewrite their summary.json. Runs on hosted models keep their per-token figures (the report's too)."""
    if not any(self_hosted(run_dir) for run_dir in summaries):
        return
    # Only here: every run ends by asking, and most (hosted models, no model) need none of the report.
    from agentcompass.report.build import Pricing, build
    from agentcompass.report.load import load_setup

    setups = [load_setup(run_dir, run_dir.name, warn=False) for run_dir in summaries]  # the run warned already
    hosted_here = {id(s) for s in setups if s.self_hosted and (s.trials or s.abandoned)}
    report = build(setups, Pricing())
    for setup, row in zip(setups, report["setups"]):
        if id(setup) not in hosted_here:
            continue
        summary = summaries[setup.dir]
        total, per_solved = row["total_cost_usd"], row["cost_per_solved_usd"]
        summary.update({
            "cost_usd": None if total is None else float(Decimal(total)),
            "cost_known": total is not None,
            "cost_per_solved_usd": None if per_solved is None else float(Decimal(per_solved)),
            "cost_basis": row["cost_basis"],
        })
        write_json(setup.dir / "summary.json", summary)
