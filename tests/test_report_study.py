"""The Coding Agent Cost Benchmark's published study deepswe33-glm-opus48 (its results/ folder,
copied unchanged into tests/data/cost-bench/) through our report's steps:

- its self-hosted job windows (manifest.csv) and hourly costs (billing.json `hour_cost`) through our
  bill-coverage step give its billing.json: every hour's covered seconds and billed dollars, the
  window and the total;
- its per-run rows (per_run.csv: task, run, passed, billed_usd) through our per-setup summary give its
  summary.csv: runs, passing runs and rates, tasks solved, $ total, per run, per passing run and per
  solved task, to the cent.
"""

from __future__ import annotations

import csv
import json
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path

import pytest

STUDY = Path(__file__).parent / "data" / "cost-bench" / "deepswe33-glm-opus48"
CENT = 0.01


def hour_start(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def test_the_studys_job_windows_and_hourly_costs_give_its_billing_json():
    from agentcompass.report.coverage import cover, window
    from agentcompass.report.split import Bucket

    published = json.loads((STUDY / "billing.json").read_text())
    # The benchmark bills the union of its self-hosted (modal*) jobs' windows, start to end of each run.
    with (STUDY / "manifest.csv").open() as f:
        jobs = [(float(r["start"]), float(r["end"])) for r in csv.DictReader(f) if r["model"].startswith("modal")]
    hours = [Bucket(hour_start(h["hour"]), hour_start(h["hour"]) + 3600, Decimal(str(h["hour_cost"])))
             for h in published["by_hour"]]
    covered = cover(hours, jobs)
    assert len(covered) == len(published["by_hour"]) == 22
    for ours, theirs in zip(covered, published["by_hour"]):
        assert round(ours.covered_s) == theirs["glm_seconds_in_hour"], theirs["hour"]
        # Their hour_cost is rounded to 1e-4 before we see it: billed agrees to well within a cent.
        assert float(ours.billed) == pytest.approx(theirs["billed"], abs=1e-4), theirs["hour"]
    total = sum(c.billed for c in covered)
    assert abs(float(total) - published["cost"]) < CENT
    assert round(sum(c.covered_s for c in covered) / 3600, 3) == published["window_hours"]
    first, last, _ = window(jobs)
    assert datetime.fromtimestamp(first, timezone.utc).isoformat() == published["window_start"]
    assert datetime.fromtimestamp(last, timezone.utc).isoformat() == published["window_end"]
    assert round(float(total) / (sum(c.covered_s for c in covered) / 3600), 2) == round(published["effective_hourly"], 2)


def study_setups():
    """Each setup of per_run.csv as our report loads a results directory: one trial per run
    (run<n> is attempt n of the task, k = 4), priced at the run's published billed_usd."""
    from agentcompass.report.costs import Costs, TrialCost
    from agentcompass.report.load import Setup, Trial
    from agentcompass.core.results import TrialResult

    setups: dict[str, Setup] = {}
    costs = Costs({}, {})
    with (STUDY / "per_run.csv").open() as f:
        for row in csv.DictReader(f):
            setup = setups.setdefault(row["setup"], Setup(row["setup"], STUDY, {}, {"name": row["setup"]}, 4))
            result = TrialResult(task_id=row["task"], attempt=int(row["run"].removeprefix("run")),
                                 status="passed" if row["passed"] == "1" else "failed",
                                 started_at="2026-07-15T00:00:00+00:00", finished_at="2026-07-15T00:00:00+00:00")
            trial = Trial(setup.name, result, None)
            setup.trials.append(trial)
            costs.trials[trial.key] = TrialCost(Decimal(row["billed_usd"]), None, "published")
    for setup in setups.values():  # the study's selection: every task it ran (run.json records it for our runs)
        setup.task_ids = sorted({t.result.task_id for t in setup.trials})
    return list(setups.values()), costs


def test_the_studys_per_run_rows_give_its_summary_csv():
    from agentcompass.report.tables import setup_rows

    setups, costs = study_setups()
    ours = {row["setup"]: row for row in setup_rows(setups, costs)}
    with (STUDY / "summary.csv").open() as f:
        published = list(csv.DictReader(f))
    assert sorted(ours) == sorted(r["setup"] for r in published)
    for theirs in published:
        row = ours[theirs["setup"]]
        assert (row["attempts"], row["passed"], row["solved_tasks"], row["tasks"]) == (
            int(theirs["runs"]), int(theirs["pass_runs"]), int(theirs["tasks_solved"]), int(theirs["tasks_total"]))
        assert round(100 * row["pass_at_1"], 1) == float(theirs["run_pass_rate_pct"])
        assert round(100 * row["solved_rate"], 1) == float(theirs["task_pass_rate_pct"])
        for ours_field, their_field in [("total_cost_usd", "total_usd"), ("avg_cost_per_attempt_usd", "avg_usd_per_run"),
                                        ("cost_per_passing_attempt_usd", "usd_per_pass_run"),
                                        ("cost_per_solved_usd", "usd_per_task_solved")]:
            assert abs(float(row[ours_field]) - float(theirs[their_field])) < CENT / 2, (theirs["setup"], their_field)

