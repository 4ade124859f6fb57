"""What a newcomer meets in the first hour (issue 28): listing a benchmark's task ids, default run names
that never collide, and input checks that hold for every harness."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_cli

DEMO_IDS = ["csv-sales-report", "fix-backup-script", "fix-median-bug", "git-revert-bad-commit",
            "implement-duration-parser", "top-ips-access-log"]


def test_list_tasks_prints_the_ids_a_run_would_select(tmp_path):
    listed = run_cli("list", "tasks", "demo", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split() == DEMO_IDS
    assert "6 tasks selected" in listed.stderr
    assert not any(tmp_path.iterdir())  # nothing written


def test_list_tasks_applies_the_selection_like_a_run_and_prints_json(tmp_path):
    params = json.dumps({"filter": "fix-", "limit": 1})
    listed = run_cli("list", "tasks", "demo", "--benchmark-params", params, "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == {"benchmark": "demo", "count": 1, "ids": ["fix-backup-script"]}
    ran = run_cli("run", "demo", "nop", "none", "--benchmark-params", params, "--run-name", "x", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    lines = (tmp_path / "results" / "x" / "demo__nop__none__local" / "trials.jsonl").read_text().splitlines()
    assert [json.loads(line)["task_id"] for line in lines] == ["fix-backup-script"]


def test_list_tasks_in_a_user_config_dir(tmp_path):
    recipes = tmp_path / "mine" / "recipes"
    recipes.mkdir(parents=True)
    (recipes / "demo_two.yaml").write_text("defaults: [demo, _self_]\nname: demo_two\nparams: {limit: 2}\n")
    listed = run_cli("list", "tasks", "demo_two", "--config-dir", str(tmp_path / "mine"), cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split() == DEMO_IDS[:2]


@pytest.mark.parametrize("args, fragment", [
    (["list", "tasks"], "list tasks needs a BENCHMARK"),
    (["list", "tasks", "demoo"], "did you mean 'demo'"),
    (["list", "benchmarks", "demo"], "agentcompass list tasks BENCHMARK"),
    (["list", "tasks", "demo", "--benchmark-params", '{"limt": 1}'], "did you mean 'limit'"),
])
def test_list_tasks_bad_input_is_one_line(args, fragment, tmp_path):
    done = run_cli(*args, cwd=tmp_path)
    assert done.returncode == 2
    assert fragment in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


@pytest.mark.parametrize("command", [["run", "demo", "oracle", "none"], ["list", "tasks", "demo"]])
def test_an_unknown_sample_id_gets_its_closest_ids_and_the_listing_command(command, tmp_path):
    done = run_cli(*command, "--benchmark-params", '{"sample_ids": ["fix-median", "nothing-like-it"]}', cwd=tmp_path)
    assert done.returncode == 2
    line = done.stderr.strip()
    assert len(line.splitlines()) == 1, line
    assert "'fix-median' (closest: fix-median-bug)" in line
    assert "'nothing-like-it'" in line and "nothing-like-it' (closest" not in line
    assert "agentcompass list tasks demo" in line
    assert not (tmp_path / "results").exists()


def test_default_run_names_carry_microseconds_and_a_random_suffix():
    from agentcompass.cli import default_run_name

    at = 1_700_000_000.123456
    names = {default_run_name(now=at) for _ in range(50)}
    assert len(names) == 50  # the same microsecond still gives distinct names
    for name in names:
        assert re.fullmatch(r"\d{8}-\d{6}-\d{6}-[a-z0-9]{4}", name), name
    assert default_run_name("validate-").startswith("validate-")


def test_two_runs_started_at_once_without_a_name_both_run(tmp_path):
    command = [sys.executable, "-m", "agentcompass", "run", "demo", "oracle", "none",
               "--benchmark-params", '{"limit": 1}']
    runs = [subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(3)]
    outcomes = [(run.wait(timeout=300), run.stderr.read()) for run in runs]
    for run in runs:
        run.stdout.close()
        run.stderr.close()
    assert [code for code, _ in outcomes] == [0, 0, 0], outcomes
    assert len(list((tmp_path / "results").iterdir())) == 3


@pytest.mark.parametrize("params", ['{"limit": 0}', '{"limit": -1}'])
def test_a_limit_below_one_is_refused(params, tmp_path):
    done = run_cli("run", "demo", "oracle", "none", "--benchmark-params", params, cwd=tmp_path)
    assert done.returncode == 2
    assert "benchmark.params.limit" in done.stderr and ">= 1" in done.stderr.replace("equal to 1", ">= 1"), done.stderr
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("harness", ["oracle", "nop"])
@pytest.mark.parametrize("command", ["run", "config"])
def test_oracle_and_nop_refuse_unknown_harness_keys_with_the_closest(harness, command, tmp_path):
    args = ["run"] if command == "run" else ["config", "show"]
    done = run_cli(*args, "demo", harness, "none", "harness.descripton=x", cwd=tmp_path)
    assert done.returncode == 2
    assert "unknown key 'harness.descripton'" in done.stderr and "did you mean 'description'" in done.stderr
    typo = run_cli(*args, "demo", harness, "none", "--harness-params", '{"step_limit": 3}', cwd=tmp_path)
    assert typo.returncode == 2 and "unknown key 'harness.step_limit'" in typo.stderr, typo.stderr
    assert not (tmp_path / "results").exists()
