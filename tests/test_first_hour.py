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
    from agentcompass.commands.args import default_run_name

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


# -- help and README agree (point 6) --------------------------------------------------------------------
def test_env_check_help_gives_env_no_default_and_cleanup_help_lists_its_envs():
    env_help = " ".join(run_cli("env", "check", "--help").stdout.split())
    assert "default local" not in env_help and "ENV execution environment: local, docker" in env_help, env_help
    cleanup_help = " ".join(run_cli("cleanup", "--help").stdout.split())
    assert ("--env ENV execution environment to clean up: docker, podman, modal, gcp, kubernetes (default docker)"
            in cleanup_help)


def test_the_results_line_comes_after_the_summary(tmp_path):
    done = run_cli("run", "demo", "oracle", "none", "--benchmark-params", '{"limit": 1}', "--run-name", "r", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[-1] == f"results: {Path('results') / 'r' / 'demo__oracle__none__local'}", lines
    assert lines[0].startswith("tasks 1"), lines


def test_a_sweep_table_and_sweep_json_keep_the_order_given(tmp_path):
    done = run_cli("run", "demo", "oracle", "none", "-m", "run.k=2,1", "--benchmark-params", '{"limit": 1}',
                   "--run-name", "s", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = [line.split()[0] for line in done.stdout.splitlines() if line.startswith("run.k=")]
    assert rows == ["run.k=2", "run.k=1"], done.stdout
    sweep = json.loads((tmp_path / "results" / "s" / "sweep.json").read_text())
    assert [run["k"] for run in sweep["runs"]] == [2, 1]


def test_the_modal_credentials_hint_names_modal_setup(tmp_path):
    pytest.importorskip("modal")
    env = {"HOME": str(tmp_path), "MODAL_TOKEN_ID": "", "MODAL_TOKEN_SECRET": "", "MODAL_CONFIG_PATH": str(tmp_path / "none.toml")}
    done = run_cli("run", "demo", "oracle", "none", "--env", "modal", cwd=tmp_path, env=env)
    assert done.returncode == 2
    assert "run `modal setup`" in done.stderr and "modal token new" not in done.stderr, done.stderr


def user_recipes(tmp_path: Path, **files: str) -> Path:
    recipes = tmp_path / "mine" / "recipes"
    recipes.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (recipes / f"{name}.yaml").write_text(text)
    return tmp_path / "mine"


def test_a_copied_demo_task_on_local_is_told_about_runs_on_host_and_build_args(tmp_path):
    demo = Path(__file__).resolve().parent.parent / "recipes" / "demo"
    mine = user_recipes(tmp_path, copied=f"name: copied\nformat: harbor\nsource: {{path: {demo}}}\n")
    done = run_cli("run", "copied", "oracle", "none", "--config-dir", str(mine), cwd=tmp_path)
    assert done.returncode == 2
    assert "--env docker" in done.stderr and "runs_on_host: true" in done.stderr and "build_args" in done.stderr, done.stderr


# -- an inherited description, git offline (points 7, 8) ------------------------------------------------
def test_an_inherited_recipe_shows_the_description_it_inherits(tmp_path):
    mine = user_recipes(tmp_path, small="defaults: [demo, _self_]\nname: small\nparams: {limit: 1}\n",
                        smaller="defaults: [small, _self_]\nname: smaller\n",
                        own="defaults: [demo, _self_]\nname: own\ndescription: my own words\n")
    listed = run_cli("list", "benchmarks", "--config-dir", str(mine), cwd=tmp_path).stdout
    # Each line: name, description, then [where it comes from; what it needs] (which differs: shipped or yours).
    described = {line.split()[0]: " ".join(line.split()[1:]).rsplit("  [", 1)[0].rsplit(" [", 1)[0]
                 for line in listed.splitlines()[1:]}
    marks = {line.split()[0]: line.rsplit("[", 1)[1] for line in listed.splitlines()[1:]}
    assert marks["demo"].startswith("shipped; local") and marks["small"].startswith("yours (")
    assert described["small"] == described["smaller"] == described["demo"] != ""
    assert described["own"] == "my own words"


def test_a_git_source_that_cannot_be_cloned_names_the_local_path_way_out(tmp_path):
    mine = user_recipes(tmp_path, gone="name: gone\nformat: harbor\nsource: {git: 'file:///nonexistent/agentcompass-repo', ref: v1}\n")
    done = run_cli("list", "tasks", "gone", "--config-dir", str(mine), cwd=tmp_path,
                   env={"AGENTCOMPASS_CACHE_DIR": str(tmp_path / "cache")})
    assert done.returncode == 2
    assert "cannot clone git source" in done.stderr and """--benchmark-params '{"path": "DIR"}'""" in done.stderr


# -- nothing imports litellm before it is needed (point 9) ----------------------------------------------
IMPORTS_OF = """
import atexit, runpy, sys
atexit.register(lambda: print("litellm imported" if "litellm" in sys.modules else "litellm not imported",
                              file=sys.stderr))
sys.argv = ["agentcompass", *sys.argv[1:]]
runpy.run_module("agentcompass", run_name="__main__", alter_sys=True)
"""


def refused_without_litellm(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    import os

    full = {**os.environ, **(env or {})}
    full.pop("AGENTCOMPASS_DEBUG", None)
    done = subprocess.run([sys.executable, "-c", IMPORTS_OF, *args], cwd=cwd, env=full, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "litellm not imported", done.stderr
    [error] = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    return error


MODEL_RUN = ["run", "demo", "mini_swe_agent", "gpt-5-mini", "--env-params", '{"isolation": "none"}']


def test_a_missing_model_key_is_refused_without_importing_litellm(tmp_path):
    error = refused_without_litellm(MODEL_RUN, tmp_path, {"OPENAI_API_KEY": ""})
    assert "no API key for model 'openai/gpt-5-mini'" in error


def test_a_run_name_in_use_is_refused_without_importing_litellm(tmp_path):
    from agentcompass.core.runlock import RunLock

    held = tmp_path / "results" / "taken" / "demo__mini_swe_agent__gpt-5-mini__local"
    with RunLock(held):
        error = refused_without_litellm([*MODEL_RUN, "--run-name", "taken"], tmp_path, {"OPENAI_API_KEY": "sk-x"})
    assert "is in use by process" in error


def test_a_run_name_with_other_settings_is_refused_without_importing_litellm(tmp_path):
    first = run_cli("run", "demo", "nop", "none", "--run-name", "x", "--benchmark-params", '{"limit": 1}', cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    run_json = tmp_path / "results" / "x" / "demo__nop__none__local" / "run.json"
    other = tmp_path / "results" / "x" / "demo__mini_swe_agent__gpt-5-mini__local"
    other.mkdir()
    (other / "run.json").write_text(run_json.read_text())
    error = refused_without_litellm([*MODEL_RUN, "--run-name", "x"], tmp_path, {"OPENAI_API_KEY": "sk-x"})
    assert "holds a run with other settings" in error


# -- local without bubblewrap (point 10) ----------------------------------------------------------------
@pytest.fixture(scope="module")
def no_bwrap(tmp_path_factory) -> dict[str, str]:
    """A PATH with every command of /usr/bin but bubblewrap."""
    farm = tmp_path_factory.mktemp("no-bwrap-bin")
    for entry in Path("/usr/bin").iterdir():
        if entry.name != "bwrap":
            (farm / entry.name).symlink_to(entry)
    return {"PATH": str(farm)}


def test_a_model_harness_on_local_without_bubblewrap_is_refused_in_one_line(tmp_path, no_bwrap):
    done = run_cli("run", "demo", "mini_swe_agent", "gpt-5-mini", cwd=tmp_path, env={**no_bwrap, "OPENAI_API_KEY": "sk-x"})
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "bubblewrap is not installed" in lines[0] and "apt-get install bubblewrap" in lines[0]
    assert "--env docker" in lines[0] and '"isolation": "none"' in lines[0]
    assert not (tmp_path / "results").exists()


def test_an_explicit_isolation_none_lets_a_model_harness_past_the_fence_check(tmp_path, no_bwrap):
    done = run_cli(*MODEL_RUN, cwd=tmp_path, env={**no_bwrap, "OPENAI_API_KEY": ""})
    assert done.returncode == 2
    assert "no API key" in done.stderr and "bubblewrap" not in done.stderr, done.stderr


def test_oracle_and_nop_still_run_without_bubblewrap(tmp_path, no_bwrap):
    done = run_cli("run", "demo", "nop", "none", "--benchmark-params", '{"limit": 1}', cwd=tmp_path, env=no_bwrap)
    assert done.returncode == 0, done.stderr
    assert "notice: bubblewrap (bwrap) is not installed" in done.stderr
