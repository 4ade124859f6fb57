"""The first hour's rough edges (issue 44), each tried as a new user meets it, following the README and docs:
`list envs` and `env check` without a cloud SDK, `report --verify` without plotly, the README's extras table,
report.html and the sweep table for a run that spent nothing, and what SIGTERM prints. (`eval` of a predictions
file that lacks instances is in test_swebench_submissions.py, beside the other eval runs.)"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, run_cli
from harbor_factory import make_file_tasks, make_recipe
from hidden_modules import WITHOUT

CLOUD_SDKS = "modal,google,paramiko"
STRUCTURED_LOG = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[.\d]*Z \[")  # structlog's console line


def without(modules: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**{k: v for k, v in os.environ.items() if k != "AGENTCOMPASS_DEBUG"}, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-c", WITHOUT, modules, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


# -- edge 2: `list envs` without the cloud SDKs ------------------------------------------------
def test_list_envs_without_the_cloud_sdks_says_what_to_install_and_where_to_look(tmp_path):
    listed = without(CLOUD_SDKS, "list", "envs", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    lines = {line.split()[0]: line for line in listed.stdout.splitlines()[1:]}
    for env in ("modal", "gcp"):
        status = lines[env][lines[env].index("[not ready"):]
        assert status.endswith(f"; see `agentcompass env check {env}`]"), status  # whole, with the promised hint
        assert f"pip install -e '{REPO}[{env}]'" in status, status  # this checkout's extra, not the index's namesake


# -- edge 5: `env check modal|gcp` without their SDK -------------------------------------------
@pytest.mark.parametrize("env", ["modal", "gcp"])
def test_env_check_without_the_sdk_is_not_ready_with_numbered_steps(tmp_path, env):
    checked = without(CLOUD_SDKS, "env", "check", env, cwd=tmp_path)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    lines = checked.stdout.splitlines()
    assert lines[0] == f"env {env}: not ready"
    assert "not installed" in lines[1]
    steps = lines[lines.index("setup:") + 1:]
    assert steps[0] == f"  1. pip install -e '{REPO}[{env}]'", checked.stdout
    assert checked.stderr == ""


# -- edge 3: `report` without plotly, then `report --verify` ----------------------------------
@pytest.fixture(scope="module")
def small_run(tmp_path_factory) -> Path:
    """A finished run of the demo with the oracle and no model: nothing spent, one task solved."""
    root = tmp_path_factory.mktemp("small")
    done = run_cli("run", "demo", "oracle", "none", "--benchmark-params", '{"limit": 1}', "--run-name", "small",
                   cwd=root)
    assert done.returncode == 0, done.stderr
    return root / "results" / "small"


def test_report_without_plotly_then_verify_checks_what_was_written(small_run, tmp_path):
    out = tmp_path / "report"
    made = without("plotly", "report", str(small_run), "--out", str(out), cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert (out / "summary.csv").is_file() and not (out / "report.html").exists()
    verified = without("plotly", "report", str(small_run), "--out", str(out), "--verify", cwd=tmp_path)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "mismatch" not in verified.stderr and "every figure" in verified.stdout
    assert "report.html not checked" in verified.stdout and f"{REPO}[report]" in verified.stdout


# -- edge 8: a setup that spent nothing -------------------------------------------------------
def test_report_page_ranks_a_setup_whose_known_cost_is_zero(small_run, tmp_path):
    made = run_cli("report", str(small_run), "--out", str(tmp_path / "report"), cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    page = (tmp_path / "report" / "report.html").read_text()
    refusal = "No setup has both a known cost and a solved task"
    assert refusal not in page, f"report.html says: {refusal}"
    answer = page[page.index('id="answer"'):]
    answer = answer[:answer.index("</ul>")]
    assert "$0.0000 per solved task" in answer, answer


def test_a_sweep_that_spent_nothing_calls_no_cost_an_estimate(tmp_path):
    make_file_tasks(tmp_path / "data", 1)
    make_recipe(tmp_path / "conf", "one", tmp_path / "data")
    done = run_cli("run", "one", "oracle", "none", "--config-dir", str(tmp_path / "conf"), "--run-name", "x",
                   "--env-params", '{"isolation": "none"}', "-m", "run.k=1,2", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "*" not in done.stdout and "an estimate" not in done.stdout, done.stdout
    sweep = json.loads((tmp_path / "results" / "x" / "sweep.json").read_text())
    assert [row["cost_is_estimate"] for row in sweep["runs"]] == [False, False]


# -- edge 4: the README's extras table and `view` ----------------------------------------------
def test_the_readme_extras_table_names_the_extra_view_asks_for(tmp_path):
    readme = (REPO / "README.md").read_text()
    table = readme[readme.index("### Optional extras"):]
    rows = [row.split("|") for row in table.splitlines() if row.startswith("|") and "view" in row]
    assert rows, "the extras table has no row for `agentcompass view`"
    extra = rows[0][2].strip().strip("`")
    refused = without("uvicorn,starlette", "view", str(tmp_path), cwd=tmp_path)
    assert refused.returncode == 2 and f"'{extra}' extra" in refused.stderr, refused.stderr


# -- edge 9: SIGTERM prints the documented line, nothing raw before it -------------------------
def test_sigterm_prints_only_the_documented_message(tmp_path):
    make_file_tasks(tmp_path / "data", 4, solve_extra="sleep 30")
    make_recipe(tmp_path / "conf", "slow", tmp_path / "data")
    stderr = tmp_path / "stderr.txt"
    env = {k: v for k, v in os.environ.items() if k != "AGENTCOMPASS_DEBUG"}
    with open(stderr, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "agentcompass", "run", "slow", "oracle", "none", "--config-dir",
                                 str(tmp_path / "conf"), "--run-name", "x", "--task-concurrency", "2",
                                 "--env-params", '{"isolation": "none"}'], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                                stderr=err)
    run_dir = tmp_path / "results" / "x" / "slow__oracle__none__local"
    deadline = time.monotonic() + 120
    while not (run_dir / "tasks").is_dir() or len(list((run_dir / "tasks").iterdir())) < 2:  # two trials under way
        assert time.monotonic() < deadline and proc.poll() is None, stderr.read_text()
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 130
    lines = [line for line in stderr.read_text().splitlines() if line.strip()]
    assert not [line for line in lines if STRUCTURED_LOG.search(line)], lines
    assert lines[-1].startswith("interrupted: open sandboxes closed"), lines
    events = [json.loads(line)["event"] for line in (run_dir / "log.jsonl").read_text().splitlines()]
    assert any(event.startswith("interrupted") for event in events)  # kept where the run's log is
