"""The command line: parsing in any order, help, list, config show, and bad input."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agentcompass.commands.args import build_invocation, split_words
from agentcompass.commands.cli import build_parser, subcommands
from hidden_modules import HIDE, WITHOUT

BAD_INPUTS = [
    # (arguments after `run`, a fragment the one-line message must contain)
    (["demoo", "oracle", "none"], "did you mean 'demo'"),
    (["demo", "orcale", "none"], "did you mean 'oracle'"),
    (["demo", "oracle", "nonee"], "unknown model 'nonee'"),
    (["demo", "oracle", "none", "--env", "lokal"], "did you mean 'local'"),
    (["demo", "oracle", "none", "--benchmark-params", "{bad"], "--benchmark-params is not valid JSON"),
    (["demo", "oracle", "none", "--env-params", "[1, 2]"], "--env-params must be a JSON object"),
    (["demo", "oracle", "none", "--k", "0"], "expected a number >= 1"),
    (["demo", "oracle", "none", "--k", "abc"], "expected a whole number"),
    (["demo", "oracle", "none", "--task-concurrency", "-1"], "expected a number >= 1"),
    (["demo", "oracle", "none", "--config", "/nonexistent/private.yaml"], "does not exist"),
    (["demo", "oracle", "none", "--config", "{bad_yaml}"], "is not valid YAML"),
    (["demo", "oracle", "none", "--config-dir", "/nonexistent/dir"], "config dir '/nonexistent/dir' does not exist"),
    (["demo", "oracle"], "needs BENCHMARK HARNESS MODEL"),
    (["demo", "oracle", "none", "run.k=["], "bad override"),
    (["demo", "oracle", "none", "run.k=1,2"], "add -m"),
    (["demo", "oracle", "none", "run.k=abc"], "invalid value for 'run.k'"),
    (["demo", "oracle", "none", "--benchmark-params", '{"sample_ids": ["no-such-task"]}'], "unknown sample_ids: 'no-such-task'"),
    (["demo", "oracle", "none", "--benchmark-params", '{"limit": -3}'], "'benchmark.params.limit' (from --benchmark-params)"),
    (["demo", "oracle", "none", "--frobnicate"], "unrecognized arguments: --frobnicate"),
    (["demo", "oracle", "none", "--config", "{missing_env}"], "cannot resolve the config"),
    (["demo", "oracle", "none", "run.no_such_key=1"], "no_such_key"),
    (["demo", "oracle", "none", "--run-name", "a/b"], "must be a plain name"),
    (["typo", "oracle", "none", "--config-dir", "{user_dir}"], "unknown key 'benchmark.timeout'"),
    (["broken", "oracle", "none", "--config-dir", "{user_dir}"], "cannot compose the config"),
    (["demo", "oracle", "none", "--env-params", '{"isolation": "chroot"}'], "'env.isolation' (from --env-params)"),
    # Values name the source the user typed, limits must be positive, and typos get the closest key.
    (["demo", "oracle", "none", "benchmark.timeouts.agent=-5"],
     "'benchmark.timeouts.agent' (from 'benchmark.timeouts.agent=-5'): Input should be greater than 0"),
    (["demo", "oracle", "none", "benchmark.resources.memory_mb=0"], "'benchmark.resources.memory_mb'"),
    (["negative", "oracle", "none", "--config-dir", "{user_dir}"],
     "'benchmark.timeouts.verify' (from {user_dir}/recipes/negative.yaml)"),
    (["demo", "oracle", "none", "--benchmark-params", '{"limt": 2}'],
     "unknown key 'benchmark.params.limt' (from --benchmark-params); did you mean 'limit'?"),
    (["limt", "oracle", "none", "--config-dir", "{user_dir}"],
     "unknown key 'benchmark.params.limt' (from {user_dir}/recipes/limt.yaml); did you mean 'limit'?"),
    (["limt_child", "oracle", "none", "--config-dir", "{user_dir}"],
     "unknown key 'benchmark.params.limt' (from {user_dir}/recipes/limt.yaml)"),  # the parent that says it
    (["demo", "oracle", "none", "--env-params", '{"isolaton": "none"}'],
     "unknown key 'env.isolaton' (from --env-params); did you mean 'isolation'?"),
    (["demo", "oracle", "none", "--config", "{env_typo}"], "unknown key 'env.isolaton' (from --config {env_typo})"),
    (["demo", "oracle", "none", "++env.isolaton=none"], "unknown key 'env.isolaton' (from '++env.isolaton=none')"),
    (["demo", "mini_swe_agent", "gpt-5-mini", "--harness-params", '{"step_limt": 3}'],
     "unknown key 'harness.step_limt' (from --harness-params); did you mean 'step_limit'?"),
    (["demo", "mini_swe_agent", "gpt-5-mini", "--harness-params", '{"wall_time_limit_s": -1}'],
     "'harness.wall_time_limit_s' (from --harness-params)"),
    (["demo", "oracle", "none", "--env", "docker", "--env-params", '{"pull_timeout_s": 0}'],
     "'env.pull_timeout_s' (from --env-params): Input should be greater than 0"),
    (["demo", "oracle", "none", "--env", "modal", "environments.modal.memory_mb=-1"],
     "'env.memory_mb' (from 'environments.modal.memory_mb=-1')"),
    (["demo", "oracle", "none", "--results-dir", "/proc/agentcompass-no-such-dir"], "is not writable"),
    (["demo", "oracle", "none", "--results-dir", "{bad_yaml}"], "results dir '{bad_yaml}' (from --results-dir) is a file"),
    (["demo", "oracle", "none", "--results-dir", "{file_child}"], "cannot be made: '{bad_yaml}' is a file"),
    (["demo", "oracle", "none", "run.results_dir={bad_yaml}"], "(from 'run.results_dir={bad_yaml}') is a file"),
    (["demo", "mini_swe_agent", "openai_compatible"], "model 'openai_compatible': model.name is not set, model.base_url is not set; pass model.name=NAME and --model-base-url URL"),
    (["demo", "mini_swe_agent", "openai_compatible", "model.name=m", "--model-base-url", "localhost:8000"],
     "'model.base_url' (from --model-base-url): expected an http:// or https:// URL"),
    (["demo", "oracle", "none", "--env", "modal", "--config", "{unset_modal}"],
     "environment variable AGENTCOMPASS_TEST_UNSET_VAR is not set"),
    (["config", "show", "demo", "oracle", "none", "run.k=1,2"], "'run.k=1,2' sweeps several values; add -m"),
    (["eval", "demo", "--predictions", "{bad_yaml}"],
     "'demo' is not a SWE-bench recipe (format 'harbor'): eval grades SWE-bench predictions; pick one of swebench,"),
    (["validate", "demo", "--env-params", '{"isolaton": "none"}'], "unknown key 'env.isolaton' (from --env-params)"),
    (["demo", "oracle", "none", "--env", "docker", "run.processes=2"],
     "run.processes=2 cannot be honoured here (the docker provider keeps connections or threads a fork would break)"),
    (["demo", "oracle", "none", "run.processes=0"], "'run.processes' (from 'run.processes=0')"),
]
COMMANDS = ("config", "eval", "validate")  # a table row starting with one of these runs it instead of `run`


@pytest.fixture
def bad_files(tmp_path):
    (tmp_path / "bad.yaml").write_text("run: {k: [1,\n")
    (tmp_path / "missing_env.yaml").write_text("model: {api_key: '${oc.env:AGENTCOMPASS_TEST_UNSET_VAR}'}\n")
    user = tmp_path / "user" / "recipes"
    user.mkdir(parents=True)
    (user / "typo.yaml").write_text("name: typo\nformat: harbor\ntimeout: {agent: 1}\n")
    (user / "broken.yaml").write_text("name: broken\nformat: [harbor\n")
    (user / "negative.yaml").write_text("defaults: [demo, _self_]\nname: negative\ntimeouts: {verify: -1}\n")
    (user / "limt.yaml").write_text("defaults: [demo, _self_]\nname: limt\nparams: {limt: 2}\n")
    (user / "limt_child.yaml").write_text("defaults: [limt, _self_]\nname: limt_child\ndescription: mine\n")
    (tmp_path / "env_typo.yaml").write_text("environments: {local: {isolaton: none}}\n")
    (tmp_path / "unset_modal.yaml").write_text("environments: {modal: {token_id: '${oc.env:AGENTCOMPASS_TEST_UNSET_VAR}'}}\n")
    return {"bad_yaml": str(tmp_path / "bad.yaml"), "missing_env": str(tmp_path / "missing_env.yaml"),
            "user_dir": str(tmp_path / "user"), "env_typo": str(tmp_path / "env_typo.yaml"),
            "unset_modal": str(tmp_path / "unset_modal.yaml"), "file_child": str(tmp_path / "bad.yaml" / "sub")}


def fill(text: str, files: dict[str, str]) -> str:
    for key, value in files.items():
        text = text.replace("{" + key + "}", value)
    return text


@pytest.mark.parametrize("args,fragment", BAD_INPUTS, ids=[" ".join(a)[:60] for a, _ in BAD_INPUTS])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(cli, tmp_path, bad_files, args, fragment):
    work = tmp_path / "work"
    work.mkdir()
    args = [fill(a, bad_files) for a in args]
    command = args[:2] if args[0] == "config" else args[:1] if args[0] in COMMANDS else ["run"]
    # The row's own --results-dir comes later and wins.
    result = cli(*command, "--results-dir", str(work / "results"), *args[len(command) if args[0] in COMMANDS else 0:],
                 cwd=work)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1, result.stderr
    assert fill(fragment, bad_files) in lines[0]
    assert "Traceback" not in result.stderr
    assert list(work.iterdir()) == []  # no results dir, no Hydra outputs/


def test_debug_env_shows_the_traceback(cli, tmp_path):
    result = cli("run", "demoo", "oracle", "none", cwd=tmp_path, env={"AGENTCOMPASS_DEBUG": "1"})
    assert result.returncode == 2


def test_flags_names_and_overrides_in_any_order(tmp_path):
    parser = build_parser()
    run = subcommands(parser)["run"]
    argv = ["--k", "2", "demo", "run.task_concurrency=3", "--env", "local", "oracle", "-m",
            "none", "--benchmark-params", '{"limit": 1, "nested": {"a": "x y"}}', "run.max_retries=0,1"]
    args = run.parse_intermixed_args(argv)
    names, extra = split_words(args.words)
    assert names == ["demo", "oracle", "none"] and args.multirun
    invocation = build_invocation(args, names, extra)
    assert invocation.overrides == [
        "recipes@benchmark=demo", "harnesses@harness=oracle", "providers@env=local", "models@model=none",
        "++benchmark.params.limit=1", "++benchmark.params.nested.a='x y'", "run.k=2",
        "++run.task_concurrency=3", "++run.max_retries=0,1",
    ]


def test_provider_model_string_selects_the_custom_preset(tmp_path):
    run = subcommands(build_parser())["run"]
    args = run.parse_intermixed_args(["demo", "oracle", "openai/gpt-4o-mini", "--model-api-key", "k-123"])
    invocation = build_invocation(args, *split_words(args.words))
    assert "models@model=custom" in invocation.overrides
    assert "model.name='openai/gpt-4o-mini'" in invocation.overrides
    assert not any("k-123" in o for o in invocation.overrides)  # the key stays out of Hydra
    assert invocation.model_api_key == "k-123"


def test_help_and_version(cli):
    for args in (["--help"], ["run", "--help"], ["list", "--help"], ["config", "show", "--help"]):
        result = cli(*args)
        assert result.returncode == 0 and "usage:" in result.stdout, args
    assert cli("--version").stdout.startswith("agentcompass ")


def test_list_shows_builtins_and_user_entries(cli, tmp_path):
    user = tmp_path / "user"
    (user / "recipes").mkdir(parents=True)
    (user / "recipes" / "mine.yaml").write_text("name: mine\ndescription: my own benchmark\nformat: harbor\n")
    result = cli("list", "--config-dir", str(user))
    assert result.returncode == 0
    assert "demo" in result.stdout and re.search(r"^  mine +my own benchmark  \[yours \(", result.stdout, re.M)
    assert "oracle" in result.stdout and "local" in result.stdout
    assert cli("list", "envs").stdout.splitlines()[0] == "envs:"


def test_config_show_redacts_secrets(cli, tmp_path):
    overlay = tmp_path / "secrets.yaml"
    overlay.write_text("environments: {local: {}}\nmodel: {api_key: very-secret-key-1}\n")
    result = cli("config", "show", "demo", "oracle", "openai/gpt-4o-mini", "--config", str(overlay),
                 "--model-base-url", "http://127.0.0.1:9/v1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    shown = yaml.safe_load(result.stdout)
    assert shown["model"]["name"] == "openai/gpt-4o-mini"
    assert shown["model"]["base_url"] == "http://127.0.0.1:9/v1"
    assert "very-secret-key-1" not in result.stdout
    assert shown["benchmark"]["name"] == "demo" and shown["env"]["name"] == "local"
    assert list(tmp_path.iterdir()) == [overlay]


def test_run_json_records_config_without_secrets(cli, tmp_path):
    result = cli("run", "demo", "nop", "openai/gpt-x", "--model-api-key", "sk-cli-secret-000",
                 "--benchmark-params", '{"limit": 1}', "--results-dir", str(tmp_path / "r"), "--run-name", "x",
                 cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    run_dir = tmp_path / "r" / "x" / "demo__nop__openai_gpt-x__local"
    run_json = json.loads((run_dir / "run.json").read_text())
    assert run_json["config"]["benchmark"]["params"]["limit"] == 1
    assert "***" in run_json["command"]
    for path in Path(tmp_path).rglob("*"):
        if path.is_file():
            assert "sk-cli-secret-000" not in path.read_text(errors="replace"), path


def test_secret_overrides_never_reach_hydra_output(cli, tmp_path):
    secret = "sk-override-secret-4242"
    result = cli("run", "demo", "nop", "openai/gpt-x", "-m", "run.k=1,2", f"model.api_key={secret}",
                 "--benchmark-params", '{"limit": 1}', "--results-dir", str(tmp_path / "r"), "--run-name", "x",
                 cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name == "multirun.yaml" for p in written)
    assert [p for p in written if secret in p.read_text(errors="replace")] == []
    assert secret not in result.stdout + result.stderr


SWEBENCH_ROWS = str(Path(__file__).parent / "data" / "swebench-lite-sample.json")
REPO = Path(__file__).resolve().parent.parent  # a hint names this checkout, never the index's 'agentcompass'
MISSING_EXTRAS = [
    # (hidden modules, arguments, the pip install the one line must name)
    ("swebench", ["run", "swebench_lite", "oracle", "none", "--env", "docker", "--benchmark-params",
                  json.dumps({"path": SWEBENCH_ROWS})], "benchmark format 'swebench' needs swebench"),
    ("datasets", ["run", "swebench_verified", "mini_swe_agent", "gpt-5-mini"], f"pip install -e '{REPO}[swebench]'"),
    ("minisweagent", ["run", "demo", "mini_swe_agent", "gpt-5-mini"], f"pip install -e '{REPO}[agents]'"),
    ("litellm", ["run", "demo", "mini_swe_agent", "openai/gpt-4o-mini"], f"needs litellm, not installed here; pip install -e '{REPO}[agents]'"),
    ("modal", ["run", "demo", "oracle", "none", "--env", "modal"], f"env 'modal' needs modal, not installed here; pip install -e '{REPO}[modal]'"),
    ("modal", ["cleanup", "--env", "modal"], f"pip install -e '{REPO}[modal]'"),
    ("paramiko", ["run", "demo", "oracle", "none", "--env", "gcp"], f"env 'gcp' needs paramiko, not installed here; pip install -e '{REPO}[gcp]'"),
    ("swebench", ["eval", "swebench_verified", "--predictions", SWEBENCH_ROWS], f"pip install -e '{REPO}[swebench]'"),
]


def run_without(modules: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "AGENTCOMPASS_DEBUG"}
    return subprocess.run([sys.executable, "-c", WITHOUT, modules, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("hidden,args,fragment", MISSING_EXTRAS, ids=[f"{h}-{a[1]}" for h, a, _ in MISSING_EXTRAS])
def test_a_missing_extra_is_one_line_before_anything_runs(tmp_path, hidden, args, fragment):
    probe = run_without(hidden, ["--version"], tmp_path)
    assert probe.returncode == 0, probe.stderr  # the wrapper itself works...
    hidden_import = subprocess.run([sys.executable, "-c", HIDE + f"import {hidden}", hidden], capture_output=True, text=True)
    assert f"No module named '{hidden}'" in hidden_import.stderr  # ...and really hides the module
    result = run_without(hidden, [*args, "--results-dir", str(tmp_path / "results")] if args[0] == "run" else args, tmp_path)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and fragment in lines[0], result.stderr
    assert list(tmp_path.iterdir()) == []


def test_an_extra_the_run_does_not_use_may_be_missing(tmp_path):
    result = run_without("modal,swebench,minisweagent,litellm,datasets",
                         ["run", "demo", "oracle", "none", "--benchmark-params", '{"limit": 1}'], tmp_path)
    assert result.returncode == 0, result.stderr
    assert "passed 1" in result.stdout


def test_a_relative_path_on_the_command_line_is_relative_to_the_current_directory(cli, tmp_path):
    import shutil

    shutil.copytree(Path(__file__).parent.parent / "recipes" / "demo", tmp_path / "mytasks")
    result = cli("run", "demo", "oracle", "none", "--benchmark-params", '{"path": "mytasks", "sample_ids": ["fix-median-bug"]}',
                 "--results-dir", "r", "--run-name", "x", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "passed 1" in result.stdout


def test_a_recipe_extending_a_shipped_one_keeps_its_paths(cli, tmp_path):
    (tmp_path / "user" / "recipes").mkdir(parents=True)
    (tmp_path / "user" / "recipes" / "my_demo.yaml").write_text("defaults: [demo, _self_]\nname: my_demo\n")
    result = cli("run", "my_demo", "oracle", "none", "--config-dir", "user", "--benchmark-params", '{"limit": 1}',
                 "--results-dir", "r", cwd=tmp_path)
    assert result.returncode == 0, result.stderr  # demo's `source: {path: demo}` is relative to demo.yaml
    assert "passed 1" in result.stdout


def test_config_show_with_m_shows_each_job(cli, tmp_path):
    result = cli("config", "show", "demo", "oracle", "none", "-m", "run.k=1,2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    jobs = list(yaml.safe_load_all(result.stdout))
    assert [job["run"]["k"] for job in jobs] == [1, 2]
    assert "# job 2 of 2: run.k=2" in result.stdout


def test_config_show_shows_the_key_variable_name_but_not_the_key(cli, tmp_path):
    result = cli("config", "show", "demo", "oracle", "gpt-5-mini", "--model-api-key", "sk-shown-never-1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    model = yaml.safe_load(result.stdout)["model"]
    assert model["api_key_env"] == "OPENAI_API_KEY" and model["api_key"] == "***"


def test_multirun_yaml_and_config_show_agree_on_what_is_secret(cli, tmp_path):
    result = cli("run", "demo", "oracle", "gpt-5-mini", "-m", "run.k=1,2", "model.api_key=sk-never-shown-7",
                 "--benchmark-params", '{"limit": 1}', "--results-dir", str(tmp_path / "r"), "--run-name", "x", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    recorded = yaml.safe_load((tmp_path / "r" / "x" / "multirun.yaml").read_text())["model"]
    shown = cli("config", "show", "demo", "oracle", "gpt-5-mini", "model.api_key=sk-never-shown-7", cwd=tmp_path)
    model = yaml.safe_load(shown.stdout)["model"]
    assert recorded["api_key_env"] == model["api_key_env"] == "OPENAI_API_KEY"
    assert model["api_key"] == "***" and recorded.get("api_key") is None


def test_help_offers_only_envs_that_exist(cli):
    shipped = sorted(p.stem for p in (Path(__file__).parent.parent / "providers").glob("*.yaml"))
    for command in ("run", "validate", "eval"):
        text = " ".join(cli(command, "--help").stdout.split())
        offered = re.search(r"execution environment: ([a-z_, ]+) \(default local", text)
        assert offered, text
        assert sorted(offered[1].split(", ")) == shipped, command


def test_a_private_overlay_for_another_env_does_not_break_a_local_run(cli, tmp_path):
    overlay = tmp_path / "secrets.yaml"
    overlay.write_text("model:\n  api_key: ${oc.env:AGENTCOMPASS_TEST_UNSET_KEY,null}\n"
                       "environments:\n  modal:\n    token_id: ${oc.env:AGENTCOMPASS_TEST_UNSET_ID}\n")
    result = cli("run", "demo", "oracle", "none", "--config", str(overlay), "--benchmark-params", '{"limit": 1}',
                 "--results-dir", str(tmp_path / "r"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
