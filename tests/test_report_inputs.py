"""`report` says what it is looking at: a report older than its runs, a run still running or ended early,
a torn last line, mismatches one line each; and without plotly the CSVs and JSON are still written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import run_cli
from test_cli import run_without

SETUP = "demo__oracle__none__local"


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """`agentcompass run demo oracle none`, then its report."""
    tmp = tmp_path_factory.mktemp("finished")
    ran = run_cli("run", "demo", "oracle", "none", "--run-name", "r", "--results-dir", str(tmp / "results"), cwd=tmp)
    assert ran.returncode == 0, ran.stderr
    made = run_cli("report", str(tmp / "results" / "r"), cwd=tmp)
    assert made.returncode == 0, made.stderr
    return tmp / "results" / "r"


@pytest.fixture
def copy(finished, tmp_path) -> Path:
    return Path(shutil.copytree(finished, tmp_path / "r"))


def set_status(run: Path, status: str) -> None:
    info_path = run / SETUP / "run.json"
    info = json.loads(info_path.read_text())
    info["status"] = status
    info_path.write_text(json.dumps(info))


def test_a_report_made_before_the_run_ended_is_stale_in_one_line(copy):
    info_path = copy / SETUP / "run.json"
    info = json.loads(info_path.read_text())
    info["finished_at"] = "2999-01-01T00:00:00.000Z"  # the run went on (a resume) after the report was made
    info_path.write_text(json.dumps(info))
    done = run_cli("report", str(copy), "--verify")
    assert done.returncode == 1
    assert "mismatch" not in done.stdout + done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1 and "is older than the run of demo__oracle__none__local" in lines[0], done.stdout
    assert f"regenerate it with agentcompass report {copy}" in lines[0]


def test_a_resumed_run_makes_the_old_report_stale(copy):
    resumed = run_cli("run", "demo", "oracle", "none", "--run-name", "r", "--results-dir", str(copy.parent),
                      cwd=copy.parent)
    assert resumed.returncode == 0, resumed.stderr
    done = run_cli("report", str(copy), "--verify")
    assert done.returncode == 1 and "is older than" in done.stdout, done.stdout + done.stderr


def test_a_running_run_gets_one_line_and_verify_waits_for_it(copy):
    from agentcompass.core.runlock import RunLock

    set_status(copy, "running")
    with RunLock(copy / SETUP):
        made = run_cli("report", str(copy), "--out", str(copy / "live"))
        checked = run_cli("report", str(copy), "--verify")
    import os

    assert made.returncode == 0, made.stderr
    note = [line for line in made.stderr.splitlines() if line.startswith("note:")]
    assert note == [f"note: {SETUP} is still running (process {os.getpid()}): 6 of 6 trials recorded so far; "
                    "its figures will change, make the report again once it ends"], made.stderr
    assert checked.returncode == 1
    assert "still running" in checked.stdout and "mismatch" not in checked.stderr, checked.stdout + checked.stderr


@pytest.mark.parametrize("status, fragment", [("running", "was killed (run.json still says running)"),
                                              ("interrupted", "was interrupted")])
def test_a_run_that_ended_early_gets_one_line(copy, status, fragment):
    set_status(copy, status)
    made = run_cli("report", str(copy), "--out", str(copy / "again"))
    assert made.returncode == 0, made.stderr
    notes = [line for line in made.stderr.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and fragment in notes[0] and "resume it with the same --run-name" in notes[0], made.stderr


def test_a_torn_last_line_gets_the_warning_run_gives(copy):
    trials = copy / SETUP / "trials.jsonl"
    with trials.open("ab") as handle:
        handle.write(b'{"task_id": "fix-med')
    made = run_cli("report", str(copy), "--out", str(copy / "again"))
    assert made.returncode == 0, made.stderr
    assert f"warning: {trials}: an unfinished last line (20 bytes) is left out" in made.stderr, made.stderr


def test_mismatches_are_one_line_each_with_expected_and_found_and_a_count(copy):
    report_path = copy / "report" / "report.json"
    report = json.loads(report_path.read_text())
    report["trials"] = report["trials"][:2]  # a report of another, shorter run
    report["setups"][0]["tasks"] = 99
    report_path.write_text(json.dumps(report))
    done = run_cli("report", str(copy), "--verify")
    assert done.returncode == 1
    mismatches = [line for line in done.stderr.splitlines() if line.startswith("mismatch:")]
    assert "mismatch: report.json: trials: expected a list of 6, found a list of 2" in mismatches, done.stderr
    assert f"mismatch: report.json: setups[{SETUP}].tasks: expected 6, found 99" in mismatches, done.stderr
    assert all(len(line) < 200 for line in mismatches), mismatches
    assert done.stdout.strip() == f"verify: {len(mismatches)} mismatch(es) in {copy / 'report'}"


def test_without_plotly_the_tables_are_written_and_the_page_names_the_extra(copy):
    out = copy / "plain"
    done = run_without("plotly", ["report", str(copy), "--out", str(out)], copy)
    assert done.returncode == 0, done.stderr
    from agentcompass.report.build import CSV_FILES

    assert sorted(p.name for p in out.iterdir()) == sorted([*CSV_FILES, "report.json"])  # everything but the page
    assert "[report]'" in done.stdout and "pip install" in done.stdout and "report.html" in done.stdout, done.stdout
