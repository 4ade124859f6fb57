"""Harbor's task.toml schema 1.0-1.4: every field is read; unknown ones refuse the task, except under [task] and
[metadata], where they are named in one warning; each field a provider cannot honour refuses the task before the
run, with one line naming it."""

from __future__ import annotations

import json
import re
import subprocess
import textwrap
import uuid
from pathlib import Path

import pytest

from agentcompass.core.errors import UserError
from agentcompass.formats.harbor.format import HarborFormat
from agentcompass.formats.harbor.schema import TaskConfig, unknown_fields
from agentcompass.core.schema import Recipe
from harbor_factory import add_toml, make_recipe, make_multi_step, make_task, schema_fixtures

# Every field of schema 1.3 (Harbor's own spelling), as one task might write them.
FULL_TOML = textwrap.dedent("""\
    schema_version = "1.3"
    source = "examples"
    multi_step_reward_strategy = "final"
    artifacts = ["/app/out.txt", { source = "/app/log", destination = "logs", service = "main" }]
    [task]
    name = "org/full"
    description = "all fields"
    authors = [{ name = "A", email = "a@example.org" }]
    keywords = ["k"]
    [metadata]
    anything = { goes = "here" }
    [agent]
    timeout_sec = 30.0
    user = "agent"
    network_mode = "no-network"
    [verifier]
    timeout_sec = 20.0
    env = { MODE = "strict" }
    user = "root"
    network_mode = "public"
    environment_mode = "shared"
    [[verifier.collect]]
    command = "git diff > /logs/artifacts/model.patch"
    service = "main"
    timeout_sec = 30.0
    user = "root"
    [solution]
    env = { HINT = "1" }
    [environment]
    build_timeout_sec = 100.0
    docker_image = "example/image:1"
    os = "linux"
    workdir = "/app"
    cpus = 2
    memory = "1G"
    storage_mb = 5000
    gpus = 0
    gpu_types = ["T4"]
    allow_internet = true
    network_mode = "public"
    env = { A = "1" }
    skills_dir = "/skills"
    mcp_servers = [{ name = "m", transport = "stdio", command = "srv", args = ["-v"] }]
    [environment.healthcheck]
    command = "true"
    interval_sec = 1.0
    retries = 2
    [[steps]]
    name = "one"
    min_reward = 0.5
    [steps.agent]
    user = "other"
    [steps.verifier]
    env = { STEP = "1" }
    [[steps]]
    name = "two"
    min_reward = { accuracy = 1.0 }
    """)


def test_every_field_of_schema_1_4_is_known():
    config = TaskConfig.model_validate(__import__("tomllib").loads(FULL_TOML))
    assert unknown_fields(config) == []
    env = config.environment
    assert (env.memory_mb, env.storage_mb, env.healthcheck.retries, env.mcp_servers[0].args) == (1024, 5000, 2, ["-v"])
    assert (config.agent.user, config.agent.network_mode, config.verifier.network_mode) == ("agent", "no-network", "public")
    assert [s.name for s in config.steps] == ["one", "two"] and config.steps[1].min_reward == {"accuracy": 1.0}
    assert config.task.name == "org/full" and config.multi_step_reward_strategy == "final"


def test_version_1_0_spelling_and_allowlist_implied_by_hosts():
    config = TaskConfig.model_validate({"version": "1.0", "agent": {"allowed_hosts": ["pypi.org"]}})
    assert config.schema_version == "1.0" and config.agent.network_mode == "allowlist"


def load(tmp_path: Path, toml_extra: str, **recipe: object) -> list:
    add_toml(make_task(tmp_path / "ds", "t", solve="true", test="echo 1 > /logs/verifier/reward.txt"), toml_extra)
    return HarborFormat(Recipe(name="h", format="harbor", source={"path": str(tmp_path / "ds")}, **recipe)).load()


def test_unknown_fields_under_task_and_metadata_get_one_warning_naming_them(tmp_path, capsys):
    [task] = load(tmp_path, '[task]\nname = "org/t"\nflavour = "mint"\n[metadata]\nanything = 1\n')
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "task.flavour (1 task)" in err[0] and err[0].startswith("warning:") and task.refusal is None


@pytest.mark.parametrize("toml_extra, named", [
    ('flavour = "mint"\n', "flavour"),
    ("[environment.extra]\nx = 1\n", "environment.extra"),
    ('[verifier]\nenvironment_mod = "separate"\n', "verifier.environment_mod"),
    ('artifacts = [{ source = "/app/x", compress = true }]\n', "artifacts[0].compress"),
])
def test_an_unknown_field_that_could_change_a_verdict_refuses_the_task(tmp_path, capsys, toml_extra, named):
    [task] = load(tmp_path, toml_extra)
    assert task.refusal and f"task.toml: {named}: not in Harbor's task.toml schema" in task.refusal, task.refusal
    assert capsys.readouterr().err == ""


def test_validate_warns_once(cli, tmp_path):
    dataset, conf = tmp_path / "tasks", tmp_path / "conf"
    add_toml(make_task(dataset, "t", solve="echo 1 > /app/ok", test='if [ -f /app/ok ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt'),
             '[task]\nname = "org/t"\nflavour = "mint"\n')
    make_recipe(conf, "odd", dataset)
    done = cli("validate", "odd", "--config-dir", str(conf), "--results-dir", str(tmp_path / "res"), "--run-name", "v")
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("task.flavour (1 task)") == 1, done.stderr


def test_known_fields_warn_nothing(tmp_path, capsys):
    load(tmp_path, 'schema_version = "1.3"\n[task]\nname = "org/t"\n')
    assert capsys.readouterr().err == ""


def test_a_bad_value_is_one_line_naming_the_field(tmp_path):
    with pytest.raises(UserError, match=r"agent\.network_mode: Input should be 'public', 'no-network' or 'allowlist'"):
        load(tmp_path, '[agent]\nnetwork_mode = "sometimes"\n')


@pytest.mark.parametrize("toml_extra, reason", [
    ('[environment]\nos = "windows"\n', 'needs [environment] os = "windows"'),
    ('[environment.tpu]\ntype = "v6e"\ntopology = "2x4"\n', "asks for [environment.tpu] (v6e, 2x4)"),
    ('[[steps]]\nname = "one"\n[steps.verifier.environment]\ncpus = 1\n', "step 'one' sets verifier.environment"),
])
def test_what_no_env_can_honour_refuses_the_task_alone_at_load(tmp_path, toml_extra, reason):
    [task] = load(tmp_path, toml_extra)
    assert task.refusal and reason in task.refusal, task.refusal


def test_fields_reach_the_task(tmp_path):
    [task] = load(tmp_path, '[agent]\nuser = "agent"\nnetwork_mode = "no-network"\n'
                            '[solution]\nenv = { S = "1" }\n[environment.healthcheck]\ncommand = "true"\n')
    assert task.agent_user == "agent" and task.users == {"[agent] user": "agent"}
    assert task.network_modes == ("no-network", "public") and task.data["networks"]["agent"] == "no-network"
    assert task.data["solution_env"] == {"S": "1"} and task.data["healthcheck"]["command"] == "true"



def test_a_recipe_image_wins_over_the_tasks_own(tmp_path):
    """Image precedence: --env-params image (the provider's) > the recipe's (per-provider override) > the task's."""
    [own] = load(tmp_path / "a", '[environment]\ndocker_image = "task/img:1"\n')
    assert own.image == "task/img:1"
    [mirrored] = load(tmp_path / "b", '[environment]\ndocker_image = "task/img:1"\n', image="mirror.local/{task_id}:2")
    assert mirrored.image == "mirror.local/t:2"

# -- refusals before the run: one line naming the field and the provider ---------------------------
@pytest.mark.parametrize("toml_extra, field", [
    ('[agent]\nuser = "nobody"\n', '[agent] user = "nobody"'),
    ('[verifier]\nuser = "nobody"\n', '[verifier] user = "nobody"'),
    ('[environment]\ngpus = 1\n', "[environment] gpus = 1"),
    ('[agent]\nallowed_hosts = ["pypi.org"]\n', 'network_mode = "allowlist"'),
])
def test_local_refuses_what_it_cannot_honour(cli, tmp_path, toml_extra, field):
    dataset, conf = tmp_path / "tasks", tmp_path / "conf"
    add_toml(make_task(dataset, "t", solve="true", test="echo 1 > /logs/verifier/reward.txt"), toml_extra)
    make_recipe(conf, "fields", dataset)
    done = cli("run", "fields", "oracle", "none", "--env", "local", "--config-dir", str(conf),
               "--results-dir", str(tmp_path / "res"), "--run-name", "r")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and field in lines[0] and "local provider" in lines[0], lines
    assert not (tmp_path / "res").exists()


# -- honoured: the fixtures pass with the oracle and fail with nop (validate), per provider ---------
def validate_fixtures(cli, tmp_path: Path, env: str, base_image: str | None) -> dict[str, dict]:
    dataset, conf = tmp_path / "tasks", tmp_path / "conf"
    ids = schema_fixtures(dataset, base_image)
    make_recipe(conf, "schema", dataset, runs_on_host=base_image is None)
    run_name = f"h13-{uuid.uuid4().hex[:8]}"  # unique: the containers' run label is this run's alone
    done = cli("validate", "schema", "--env", env, "--config-dir", str(conf), "--results-dir", str(tmp_path / "res"),
               "--run-name", run_name)
    run_dir = tmp_path / "res" / run_name / f"schema__oracle__none__{env}"
    assert run_dir.is_dir(), done.stderr[-3000:]
    rows = {r["task_id"]: r for r in map(json.loads, (run_dir / "trials.jsonl").read_text().splitlines())}
    assert sorted(rows) == sorted(ids)
    assert done.returncode == 0, (done.stderr[-3000:], rows)
    return rows


def test_multi_step_stops_below_min_reward(cli, tmp_path):
    """Step one's reward 1.0 is below its min_reward 2.0: step two never runs, and is left out of the mean
    (Harbor 0.26's Trial._aggregate_step_rewards: steps without a verifier result are not in the denominator)."""
    dataset, conf = tmp_path / "tasks", tmp_path / "conf"
    make_multi_step(dataset, "stops", None, first_min_reward=2.0)
    make_recipe(conf, "steps", dataset)
    done = cli("run", "steps", "oracle", "none", "--env", "local", "--config-dir", str(conf),
               "--results-dir", str(tmp_path / "res"), "--run-name", "r")
    assert done.returncode == 0, done.stderr
    run_dir = tmp_path / "res" / "r" / "steps__oracle__none__local"
    [row] = map(json.loads, (run_dir / "trials.jsonl").read_text().splitlines())
    assert row["details"]["steps_run"] == 1 and row["reward"] == 1.0 and "two/reward" not in row["rewards"], row
    assert (run_dir / "tasks" / "stops" / "attempt-1" / "steps" / "one" / "verifier.log").read_text() == "checking step one\n"


def check_multi_step(rows: dict[str, dict]) -> None:
    full = rows["hello-multi-step"]
    assert full["reward"] == 1.0 and full["details"]["steps_run"] == 2 and full["rewards"]["two/reward"] == 1.0


def test_fields_honoured_on_local(cli, tmp_path):
    rows = validate_fixtures(cli, tmp_path, "local", None)
    check_multi_step(rows)
    assert rows["hello-healthcheck"]["reward"] == 1.0 and rows["network-policy"]["reward"] == 1.0


@pytest.mark.docker
def test_fields_honoured_on_docker(cli, base_image, tmp_path):
    rows = validate_fixtures(cli, tmp_path, "docker", base_image)
    check_multi_step(rows)
    for task_id in ("hello-user", "network-policy", "hello-healthcheck", "separate-verifier", "sidecar-artifacts", "hello-skills"):
        assert rows[task_id]["reward"] == 1.0, rows[task_id]


@pytest.mark.docker
@pytest.mark.parametrize("toml_extra, field", [
    ("[environment]\ngpus = 2\n", "[environment] gpus = 2"),
])
def test_docker_refuses_what_it_cannot_honour(cli, base_image, tmp_path, toml_extra, field):
    dataset, conf = tmp_path / "tasks", tmp_path / "conf"
    add_toml(make_task(dataset, "t", solve="true", test="true", dockerfile=f"FROM {base_image}\n"), toml_extra)
    make_recipe(conf, "gpus", dataset, runs_on_host=False)
    done = cli("run", "gpus", "oracle", "none", "--env", "docker", "--config-dir", str(conf),
               "--results-dir", str(tmp_path / "res"), "--run-name", f"h13-{uuid.uuid4().hex[:8]}")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert field in lines[0] and "docker provider" in lines[0]


# -- a Harbor dataset by git URL: one YAML file in a user config dir ---------------------------------
def test_a_harbor_dataset_repository_is_one_yaml_file(cli, tmp_path):
    """Any Harbor-format repository, pinned to a commit, with its tasks under a sub-path; cloned once."""
    repo = tmp_path / "repo"
    schema_fixtures(repo / "datasets" / "mine", None)
    author = ["-c", "user.name=t", "-c", "user.email=t@example.com"]
    for args in (["init", "-q"], [*author, "add", "."], [*author, "commit", "-qm", "tasks"]):
        subprocess.run(["git", *args], cwd=repo, check=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()
    conf = tmp_path / "conf"
    (conf / "recipes").mkdir(parents=True)
    (conf / "recipes" / "mine.yaml").write_text(
        f"name: mine\ndescription: our tasks\nformat: harbor\nruns_on_host: true\n"
        f"source: {{git: 'file://{repo}', ref: {commit}, subdir: datasets/mine}}\n")
    env = {"AGENTCOMPASS_CACHE_DIR": str(tmp_path / "cache")}
    done = cli("validate", "mine", "--config-dir", str(conf), "--results-dir", str(tmp_path / "res"), "--run-name", "v", env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    [checkout] = (tmp_path / "cache" / "datasets").iterdir()
    assert (checkout / "datasets" / "mine" / "hello-multi-step" / "task.toml").is_file()


def test_an_unhealthy_environment_never_reaches_the_agent(cli, tmp_path):
    dataset, conf = tmp_path / "tasks", tmp_path / "conf"
    add_toml(make_task(dataset, "sick", solve="touch /app/agent-ran", test="echo 1 > /logs/verifier/reward.txt"),
             "[environment.healthcheck]\ncommand = 'echo probing; false'\ninterval_sec = 0\nretries = 2\n")
    make_recipe(conf, "sick", dataset)
    done = cli("run", "sick", "oracle", "none", "--env", "local", "--config-dir", str(conf),
               "--results-dir", str(tmp_path / "res"), "--run-name", "r", "--max-retries", "0")
    assert done.returncode == 0, done.stderr
    run_dir = tmp_path / "res" / "r" / "sick__oracle__none__local"
    [row] = map(json.loads, (run_dir / "trials.jsonl").read_text().splitlines())
    assert row["status"] == "error" and row["error_category"] == "infra" and "healthcheck failed 2 times" in row["message"]
    assert (run_dir / "tasks" / "sick" / "attempt-1" / "healthcheck.log").read_text().count("\nprobing\n") == 2


def test_local_without_bubblewrap_refuses_a_phase_without_network(cli, tmp_path):
    dataset, conf = tmp_path / "tasks", tmp_path / "conf"
    add_toml(make_task(dataset, "t", solve="true", test="true"), '[agent]\nnetwork_mode = "no-network"\n')
    make_recipe(conf, "offline", dataset)
    done = cli("run", "offline", "oracle", "none", "--env", "local", "--env-params", '{"isolation": "none"}',
               "--config-dir", str(conf), "--results-dir", str(tmp_path / "res"), "--run-name", "r")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert "network_mode no-network and public in different phases" in lines[0] and "local provider" in lines[0]


def test_every_shipped_git_recipe_pins_a_commit():
    """Scores are reproducible only from a fixed commit; a `_head` recipe follows a branch on purpose."""
    import yaml

    recipes = Path(__file__).parent.parent / "recipes"
    for path in sorted(recipes.glob("*.yaml")):
        recipe = yaml.safe_load(path.read_text())
        source = recipe.get("source") or {}
        if "git" in source and not recipe["name"].endswith("_head"):
            assert re.fullmatch(r"[0-9a-f]{40}", str(source.get("ref"))), f"{path.name}: ref {source.get('ref')!r}"
