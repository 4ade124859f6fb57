"""`agentcompass analyze` on a run the runner really made: mini_swe_agent against the scripted endpoint solves the
demo task after trying the network in a task that forbids it. The trial records the agent phase's network, so the
network detector flags it; `--flagged-as failed` re-scores beside the run's own summary; the report and the
viewer show the flags."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_cli, skip_or_fail
from fake_llm_server import FakeLLM, FakeLLMServer

FIX_COMMANDS = [
    "cd /app && python3 -m unittest test_stats 2>&1 | tail -3",
    "sed -i 's/return (data\\[mid\\] + data\\[mid + 1\\]) \\/ 2/return (data[mid - 1] + data[mid]) \\/ 2/' /app/stats.py"
    " && python3 -m unittest test_stats",
    "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT",
]
# The demo tasks say allow_internet = false: this download is what the network detector is for.
DOWNLOAD = "curl -s --max-time 3 http://192.0.2.1/fix.py -o /tmp/fix.py || echo offline"
TASK = "fix-median-bug"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    results = tmp_path_factory.mktemp("analyze-run") / "results"
    llm = FakeLLM([DOWNLOAD, *FIX_COMMANDS])
    with FakeLLMServer(llm) as server:
        done = run_cli("run", "demo", "mini_swe_agent", "glm-5.2", "--model-base-url", server.base_url,
                       "--model-api-key", "sk-test-analyze", "--results-dir", str(results), "--run-name", "net",
                       "--benchmark-params", json.dumps({"sample_ids": [TASK]}), "--analyze",
                       env={"MSWEA_GLOBAL_CONFIG_DIR": "", "OPENAI_API_KEY": ""})
    assert done.returncode == 0, done.stderr[-2000:]
    [found] = list((results / "net").glob("demo__*"))
    assert "flags: network_forbidden=1" in done.stdout  # run --analyze: analyzed as the run ended
    return found


def analysis_rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "analysis.jsonl").read_text().splitlines()]


def test_the_trial_records_the_agent_phases_network(run_dir):
    [trial] = [json.loads(line) for line in (run_dir / "trials.jsonl").read_text().splitlines()]
    assert trial["status"] == "passed"
    assert trial["details"]["allow_internet"] is False and trial["details"]["agent_network"] == "no-network"


def test_a_download_in_a_no_internet_task_is_flagged_with_its_step_on_a_real_run(run_dir):
    done = run_cli("analyze", str(run_dir))
    assert done.returncode == 0, done.stderr
    [row] = analysis_rows(run_dir)
    [flag] = [f for f in row["flags"] if f["detector"] == "network_forbidden"]
    assert flag["step"] == 1 and flag["command"] == DOWNLOAD and flag["severity"] == "high"


def test_flagged_as_failed_rescores_beside_the_run_and_never_changes_its_own_files(run_dir):
    before = {name: (run_dir / name).read_bytes() for name in ("trials.jsonl", "summary.json")}
    done = run_cli("analyze", str(run_dir), "--flagged-as", "failed")
    assert done.returncode == 0, done.stderr
    rescored = json.loads((run_dir / "summary.flagged-as-failed.json").read_text())
    assert (rescored["passed"], rescored["failed"], rescored["pass_at_1"], rescored["solved_tasks"]) == (0, 1, 0.0, 0)
    assert rescored["flagged_attempts"] == [f"{TASK}/1"] and rescored["passed_flagged"] == 1
    assert {name: (run_dir / name).read_bytes() for name in before} == before
    assert json.loads(before["summary.json"])["pass_at_1"] == 1.0
    assert "pass@1 0.000" in done.stdout


def test_flagged_as_takes_only_failed(run_dir):
    done = run_cli("analyze", str(run_dir), "--flagged-as", "passed")
    assert done.returncode == 2 and "Traceback" not in done.stderr and "failed" in done.stderr


def test_the_report_shows_flags_per_attempt_and_the_rate_with_flagged_as_failed(run_dir, tmp_path):
    assert run_cli("analyze", str(run_dir)).returncode == 0
    done = run_cli("report", str(run_dir), "--out", str(tmp_path / "report"))
    assert done.returncode == 0, done.stderr
    [trial] = list(csv.DictReader((tmp_path / "report" / "per_trial.csv").open()))
    assert trial["flags"] == "network_forbidden" and trial["failure_mode"] == "" and trial["status"] == "passed"
    [setup] = list(csv.DictReader((tmp_path / "report" / "summary.csv").open()))
    assert (setup["pass_at_1"], setup["flagged"], setup["passed_flagged"]) == ("1.0", "1", "1")
    assert (setup["pass_at_1_flagged_as_failed"], setup["solved_tasks_not_flagged"]) == ("0.0", "0")
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert any("flagged by agentcompass analyze" in line for line in report["banners"])
    # The page's setups table: solved and solved-not-flagged side by side, and $ per solved task for both.
    page = (tmp_path / "report" / "report.html").read_text()
    name = setup["setup"]
    assert f'data-figure="setup:{name}:solved_tasks"><span class="v">1 / 1' in page
    assert f'data-figure="setup:{name}:solved_not_flagged"><span class="v">0 / 1' in page
    assert f'data-figure="setup:{name}:cost_per_solved_not_flagged_usd"><span class="v">n/a: none solved' in page


def test_run_analyze_with_a_judge_that_cannot_answer_is_refused_before_the_run(tmp_path):
    done = run_cli("run", "demo", "nop", "none", "--analyze-judge", "openai/no-such-judge", "--results-dir",
                   str(tmp_path / "results"), env={"OPENAI_API_KEY": ""})
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "no API key" in done.stderr, done.stderr
    assert not (tmp_path / "results").exists()


def test_a_setup_never_analysed_has_empty_flag_columns(run_dir, tmp_path):
    copy = tmp_path / run_dir.name
    shutil.copytree(run_dir, copy)
    (copy / "analysis.jsonl").unlink()
    assert run_cli("report", str(copy), "--out", str(tmp_path / "report")).returncode == 0
    [trial] = list(csv.DictReader((tmp_path / "report" / "per_trial.csv").open()))
    [setup] = list(csv.DictReader((tmp_path / "report" / "summary.csv").open()))
    assert trial["flags"] == "" and setup["flagged"] == "" and setup["analysed"] == "False"


def test_the_viewer_shows_the_flags_in_the_grid_and_the_evidence_on_the_attempt_page(run_dir):
    assert run_cli("analyze", str(run_dir)).returncode == 0
    if shutil.which("chromium") is None:
        skip_or_fail("no chromium (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    root = run_dir.parent.parent
    proc = subprocess.Popen([sys.executable, "-m", "agentcompass", "view", str(root), "--port", "0"],
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        url = proc.stderr.readline().split("http://", 1)[1].split()[0]  # type: ignore[union-attr]
        base = "http://" + url.split("?")[0].rstrip("/")
        run_id = "0/" + run_dir.relative_to(root).as_posix()
        with sync_playwright() as driver:
            browser = driver.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page()
            page.goto("http://" + url)  # the link carries the viewer's token
            page.goto(f"{base}/run?run={run_id}")
            page.wait_for_selector("#grid td.cell[data-task]")
            assert "network_forbidden" in page.locator("#grid td.cell").first.inner_text()
            page.select_option("#f-flag", "clean")
            assert page.locator("#grid tbody tr").count() == 0
            page.select_option("#f-flag", "flagged")
            assert page.locator("#grid tbody tr").count() == 1
            page.goto(f"{base}/attempt?run={run_id}&task={TASK}&n=1")
            flags = page.locator("#flags").inner_text()
            assert "network_forbidden" in flags and "step 1" in flags and "192.0.2.1" in flags
            browser.close()
    finally:
        proc.send_signal(2)
        proc.wait(timeout=10)
