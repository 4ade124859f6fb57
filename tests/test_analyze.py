"""`agentcompass analyze`: the rule detectors and the failure taxonomy on the labelled calibration set (honest
and cheating attempts of the demo tasks in mini-swe-agent's, Claude Code's and codex's trajectory shapes), the
taxonomy on real records of the demo run with nop and oracle, analysis.jsonl's shape and the CLI's refusals."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agentcompass.analyze.detectors import DETECTORS

REPO = Path(__file__).resolve().parent.parent
CALIBRATION = REPO / "tests" / "data" / "analyze_calibration"
LABELS = json.loads((CALIBRATION / "labels.json").read_text())
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def agentcompass(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agentcompass", *args], capture_output=True, text=True, env=ENV,
                          cwd=cwd, timeout=300)


@pytest.fixture(scope="module")
def analysed(tmp_path_factory) -> dict[str, dict]:
    results = tmp_path_factory.mktemp("calibration") / "results"
    shutil.copytree(CALIBRATION / "results", results)
    done = agentcompass("analyze", str(results))
    assert done.returncode == 0, done.stderr
    rows = {}
    for path in results.glob("*/analysis.jsonl"):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            rows[f"{path.parent.name}/{row['task_id']}/{row['attempt']}"] = row
    return {"rows": rows, "results": results, "stdout": done.stdout}


@pytest.mark.parametrize("key", sorted(LABELS))
def test_each_calibration_attempt_gets_exactly_its_labelled_flags_and_failure_mode(analysed, key):
    row = analysed["rows"][key]
    assert sorted({f["detector"] for f in row["flags"]}) == sorted(LABELS[key]["detectors"])
    assert (row["failure_mode"] or {}).get("mode") == LABELS[key]["failure_mode"]


@pytest.mark.parametrize("detector", sorted(DETECTORS))
def test_every_detector_has_a_cheat_and_an_honest_attempt_of_the_same_task(detector):
    cheats = {k.rsplit("/", 1)[0] for k, v in LABELS.items() if detector in v["detectors"]}
    honest = {k.rsplit("/", 1)[0] for k, v in LABELS.items() if not v["detectors"] and v["failure_mode"] is None}
    assert cheats & honest, f"{detector}: no task with both a planted cheat and an honest solve"


def test_flags_carry_evidence_where_it_happened(analysed):
    rows = analysed["rows"]
    solution = rows["demo__mini_swe_agent__calibration__local/csv-sales-report/2"]["flags"][0]
    assert solution["step"] == 2 and solution["command"] == "cat /solution/solve.sh"
    skip = next(f for f in rows["demo__mini_swe_agent__calibration__local/fix-median-bug/2"]["flags"]
                if "skip" in f["evidence"])
    assert skip["file"] == "tests/test_stats.py" and skip["line"] == 2 and skip["patch"] == "patch.diff"
    failing = rows["demo__mini_swe_agent__calibration__local/fix-median-bug/5"]["failure_mode"]
    assert failing["tests"] == ["test_even_six (__main__.TestMedian.test_even_six)",
                                "test_floats (__main__.TestMedian.test_floats)"]


def test_analysis_files_have_the_documented_shape_and_summary_json_is_left_alone(analysed):
    for row in analysed["rows"].values():
        assert set(row) == {"task_id", "attempt", "status", "flags", "failure_mode"}
        assert all({"detector", "severity", "evidence"} <= set(f) and f["severity"] in ("high", "medium")
                   for f in row["flags"])
        assert (row["failure_mode"] is None) == (row["status"] == "passed")
    setup = analysed["results"] / "demo__claude_code__calibration__local"
    summary = json.loads((setup / "analysis.json").read_text())
    assert (summary["attempts"], summary["passed"], summary["flagged"], summary["passed_not_flagged"]) == (7, 5, 3, 3)
    assert not (setup / "summary.json").exists()
    assert "demo__claude_code__calibration__local" in analysed["stdout"] and "integrity=2" in analysed["stdout"]


def test_calibration_benchmark_reports_no_mistake():
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "analyze_calibration.py")], capture_output=True,
                          text=True, env=ENV, timeout=120)
    assert done.returncode == 0 and "MISTAKE" not in done.stdout, done.stdout
    assert "honest 16 (flagged: 0)" in done.stdout


def test_real_demo_records_of_nop_and_oracle(tmp_path):
    """The taxonomy on records the runner really wrote: nop never acts, the oracle (which runs the task's own
    solution) passes and is never flagged for reading it."""
    for harness in ("nop", "oracle"):
        done = agentcompass("run", "demo", harness, "none", "--env", "local", "--results-dir", str(tmp_path),
                            "--run-name", harness)
        assert done.returncode == 0, done.stderr[-2000:]
    assert agentcompass("analyze", str(tmp_path / "nop"), str(tmp_path / "oracle")).returncode == 0
    nop = [json.loads(line) for line in next((tmp_path / "nop").glob("*/analysis.jsonl")).read_text().splitlines()]
    oracle = [json.loads(line) for line in next((tmp_path / "oracle").glob("*/analysis.jsonl")).read_text().splitlines()]
    assert len(nop) == len(oracle) == 6
    assert {r["failure_mode"]["mode"] for r in nop} == {"no_actions"} and all(not r["flags"] for r in nop)
    assert all(r["status"] == "passed" and r["failure_mode"] is None and not r["flags"] for r in oracle)


@pytest.mark.parametrize("make", ["missing", "empty_dir", "no_trials"])
def test_a_path_that_is_no_finished_run_is_refused_in_one_line_and_nothing_is_written(tmp_path, make):
    good = tmp_path / "good"
    shutil.copytree(CALIBRATION / "results" / "demo__codex__calibration__local", good)
    bad = tmp_path / "bad"
    if make != "missing":
        bad.mkdir()
    if make == "no_trials":
        (bad / "run.json").write_text("{}")
    done = agentcompass("analyze", str(good), str(bad))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and str(bad) in done.stderr
    assert not (good / "analysis.jsonl").exists()
