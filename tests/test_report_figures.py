"""The report's intervals in its files, its banners, its labels, and `--verify` reading the numbers
of report.html back out of the page (without a browser: the page's HTML is parsed)."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from test_report import T0, copy_run, demo, iso, sweep  # noqa: F401  (fixtures)


def test_intervals_and_paired_differences_are_in_report_json_and_the_csvs(cli, sweep):  # noqa: F811
    assert cli("report", str(sweep), "--hourly-usd", "36").returncode == 0
    out = sweep / "report"
    report = json.loads((out / "report.json").read_text())
    assert report["statistics"]["resamples"] == 2000 and "Wilson" in report["statistics"]["method"]
    summary = {r["setup"]: r for r in csv.DictReader((out / "summary.csv").open())}
    gpt = summary["demo__mini__gpt__local"]  # both tasks passed, $0.02 and $0.03
    # 2 of 2, Wilson by hand: centre 1.960365 / 2.920729 = 0.671192, half 0.671052 x 0.489991 = 0.328810
    assert float(gpt["pass_at_1_low"]) == pytest.approx(0.34238, abs=2e-5) and gpt["pass_at_1_high"] == "1.0"
    # Resamples of {t1, t2} cost $0.04, $0.05 or $0.06 for 2 solved: $0.02 .. $0.03 per solved task.
    assert (gpt["cost_per_solved_low_usd"], gpt["cost_per_solved_high_usd"]) == ("0.020000", "0.030000")
    assert gpt["label"] == "gpt-x · mini"
    # All four setups ran t1 and t2: 6 pairs. gpt (2 solved) against mystery (none): +100 points of solved rate.
    pairs = {(r["a"], r["b"]): r for r in csv.DictReader((out / "paired_differences.csv").open())}
    assert len(pairs) == 6
    gpt_mystery = pairs[("demo__mini__gpt__local", "demo__mini__mystery__local")]
    assert (gpt_mystery["solved_rate_diff"], gpt_mystery["solved_rate_differs"]) == ("1.0", "True")
    assert gpt_mystery["cost_per_solved_usd_diff"] == ""  # mystery's cost is unknown
    cells = {(r["task_id"], r["setup"]): r for r in csv.DictReader((out / "per_task.csv").open())}
    assert cells[("t1", "demo__mini__glm__local__none")]["cost_usd"] == "0.150000"  # hand-computed in test_report.sweep


def test_labels_are_model_tier_harness_and_grow_only_where_two_clash(cli, sweep, tmp_path):  # noqa: F811
    import shutil

    twin = sweep / "demo__mini__gpt__docker"
    shutil.copytree(sweep / "demo__mini__gpt__local", twin)
    info = json.loads((twin / "run.json").read_text())
    info["config"]["labels"]["env"] = "docker"
    (twin / "run.json").write_text(json.dumps(info))
    assert cli("report", str(sweep), "--hourly-usd", "36").returncode == 0
    labels = {s["setup"]: s["label"] for s in json.loads((sweep / "report" / "report.json").read_text())["setups"]}
    assert labels["demo__mini__gpt__local"] == "gpt-x · mini · local" and labels["demo__mini__gpt__docker"] == "gpt-x · mini · docker"
    assert labels["demo__mini__glm__local__high"] == "glm-5.2 · high · mini"


def banner(page: str, name: str) -> str | None:
    found = re.search(rf'<div class="banner [a-z]+" id="banner-{name}">(.*?)</div>', page, re.S)
    return None if found is None else re.sub(r"<[^>]+>", "", found.group(1))


def test_an_interrupted_run_with_missing_attempts_and_errors_gets_a_banner(cli, sweep):  # noqa: F811
    run_dir = sweep / "demo__mini__glm__local__high"
    info = json.loads((run_dir / "run.json").read_text())
    (run_dir / "run.json").write_text(json.dumps(info | {"status": "interrupted"}))
    (run_dir / "summary.json").write_text(json.dumps({"trials_expected": 3}))
    gpt = sweep / "demo__mini__gpt__local" / "trials.jsonl"
    error = {"task_id": "t3", "attempt": 1, "status": "error", "error_category": "infra",
             "started_at": iso(T0), "finished_at": iso(T0 + 1)}
    gpt.write_text(gpt.read_text() + json.dumps(error) + "\n")
    assert cli("report", str(sweep), "--hourly-usd", "36").returncode == 0
    page = (sweep / "report" / "report.html").read_text()
    text = banner(page, "incomplete")
    assert text is not None
    assert "glm-5.2 · high · mini: run interrupted; 2 of 3 attempts recorded" in text
    assert "gpt-x · mini: 1 attempt(s) have no verdict" in text  # an infra error: no verdict under any recipe rule
    assert "glm-5.2 · none · mini" not in text
    assert banner(page, "uncovered") is None


def test_a_bill_that_misses_the_run_gets_a_banner(cli, sweep, tmp_path):  # noqa: F811
    # The bill's only hour starts an hour after every call: all 30 s of generation (none t1 [0,20] and
    # high t2 [30,40], high t1 inside none's) fall outside it.
    bill = tmp_path / "bill.csv"
    bill.write_text(f"interval_start,cost\n{iso(T0 + 3600)},1.00\n")
    assert cli("report", str(sweep), "--bill", str(bill)).returncode == 0
    text = banner((sweep / "report" / "report.html").read_text(), "uncovered")
    assert text is not None and "30 s of generation fall outside every bill interval" in text


def tamper(page: Path, old: str, new: str) -> None:
    text = page.read_text()
    assert text.count(old) >= 1, old
    page.write_text(text.replace(old, new, 1))


def test_verify_reads_the_numbers_printed_in_report_html(cli, demo, tmp_path):  # noqa: F811
    run = copy_run(demo, tmp_path)
    page = run / "report" / "report.html"
    assert cli("report", str(run)).returncode == 0  # the copy's own report (the inputs are its paths)
    assert cli("report", str(run), "--verify").returncode == 0
    # The oracle solved all 6 demo tasks: its solved cell reads "6 / 6"; make it say 5.
    tamper(page, 'data-figure="setup:demo__oracle__none__local:solved_tasks"><span class="v">6 / 6',
           'data-figure="setup:demo__oracle__none__local:solved_tasks"><span class="v">5 / 6')
    proc = cli("report", str(run), "--verify")
    assert proc.returncode == 1
    assert "report.html: setup:demo__oracle__none__local:solved_tasks: expected '6 / 6', found '5 / 6'" in proc.stderr


def test_verify_reads_the_points_of_the_charts(cli, sweep):  # noqa: F811
    assert cli("report", str(sweep), "--hourly-usd", "36").returncode == 0
    page = sweep / "report" / "report.html"
    # gpt-x's point: $0.025 per solved task; move it to $0.02. The chart data is JSON as the standard
    # library writes it (whether or not orjson is installed): the name's middle dot is escaped.
    tamper(page, '"name":"gpt-x \\u00b7 mini","x":[0.025]', '"name":"gpt-x \\u00b7 mini","x":[0.02]')
    proc = cli("report", str(sweep), "--verify")
    assert proc.returncode == 1
    assert "report.html: chart-cost-vs-solved: gpt-x · mini: x: expected [0.025], found [0.02]" in proc.stderr


def test_verify_fails_when_the_page_is_missing(cli, sweep):  # noqa: F811
    assert cli("report", str(sweep), "--hourly-usd", "36").returncode == 0
    (sweep / "report" / "report.html").unlink()
    proc = cli("report", str(sweep), "--verify")
    assert proc.returncode == 1 and "report.html: missing from" in proc.stderr


def test_verify_recomputes_the_intervals(cli, sweep):  # noqa: F811
    assert cli("report", str(sweep), "--hourly-usd", "36").returncode == 0
    path = sweep / "report" / "summary.csv"
    rows = list(csv.DictReader(path.open()))
    gpt = next(r for r in rows if r["setup"] == "demo__mini__gpt__local")
    gpt["cost_per_solved_high_usd"] = "0.029000"  # was 0.030000: a narrower interval than the tasks allow
    with path.open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    proc = cli("report", str(sweep), "--verify")
    assert proc.returncode == 1
    assert ("summary.csv: demo__mini__gpt__local: cost_per_solved_high_usd: expected '0.030000', found '0.029000'"
            in proc.stderr)


def test_the_page_shows_what_the_bill_step_and_the_pricing_record_when_present(cli, sweep):  # noqa: F811
    """Fields of the bill step (per-endpoint bill groups with per-interval coverage) and of the pricing
    (retried tries, interrupted attempts, a harness's own figure) are shown when a report holds them."""
    from agentcompass.report.page import render
    from agentcompass.report.verify import page_figures

    assert cli("report", str(sweep), "--hourly-usd", "36").returncode == 0
    report = json.loads((sweep / "report" / "report.json").read_text())  # the page is rendered from these fields
    none = next(s for s in report["setups"] if s["setup"] == "demo__mini__glm__local__none")
    gpt = next(s for s in report["setups"] if s["setup"] == "demo__mini__gpt__local")
    none.update(retry_cost_usd="0.040000", interrupted_attempts=1)
    gpt.update(reported_cost_usd="0.060000", cost_difference_pct=20.0)
    report["billing"] = {"source": "bill.csv", "billed_usd": "0.008250", "split_usd": "0.008250", "unattributed_usd": "0.000000",
                         "uncovered_s": 12.5, "groups": [{
                             "endpoint": "glm-5.2@http://127.0.0.1:9/v1", "source": "bill.csv", "bill_usd": "1.150000",
                             "billed_usd": "0.008250", "outside_window_usd": "1.141750", "split_usd": "0.008250",
                             "unattributed_usd": "0.000000", "uncovered_s": 12.5, "window_s": 33.0,
                             "window_start": iso(T0 - 1), "window_end": iso(T0 + 41),
                             "uncovered_setups": ["demo__mini__glm__local__high"],
                             "intervals": [{"start": iso(T0), "end": iso(T0 + 3600), "cost_usd": "0.90", "covered_s": 33.0,
                                            "billed_usd": "0.008250", "attributed_usd": "0.008250", "unattributed_usd": "0.000000"}]}]}
    page = render(report)
    cells, _ = page_figures(page)
    assert cells["billing:0:bill for the hours of the run"] == "$1.15"
    assert cells["billing:0:of which outside the jobs' active window"] == "$1.14"
    assert cells["billing:0:jobs' window"] == "2027-01-15 07:59 UTC – 2027-01-15 08:00 UTC"  # T0 - 1 s to T0 + 41 s
    assert cells["bill:0:0:covered_s"] == "33 s" and cells["bill:0:0:attributed_usd"] == "$0.0083"
    assert cells["setup:demo__mini__glm__local__none:retry_cost_usd"] == "$0.0400"
    assert cells["setup:demo__mini__gpt__local:reported_cost_usd"] == "$0.0600 +20.0 % from ours"
    incomplete, uncovered = banner(page, "incomplete"), banner(page, "uncovered")
    assert "glm-5.2 · none · mini: 1 attempt(s) interrupted before they were recorded" in incomplete
    assert "12 s of generation fall outside" in uncovered and "cost unknown for glm-5.2 · high · mini" in uncovered
