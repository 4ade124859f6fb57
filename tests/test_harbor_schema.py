"""Harbor's task.toml schema 1.0-1.3: every field is read; unknown ones are named in one warning;
each field a provider cannot honour refuses the task before the run, with one line naming it."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from agentcompass.errors import UserError
from agentcompass.formats.harbor import HarborFormat
from agentcompass.formats.harbor_schema import TaskConfig, unknown_fields
from agentcompass.schema import Recipe
from harbor_factory import add_toml, make_recipe, make_task

# Every field of schema 1.3 (Harbor's own spelling), as one task might write them.
FULL_TOML = textwrap.dedent("""\
    schema_version = "1.3"
    source = "examples"
    multi_step_reward_strategy = "final"
    artifacts = ["/app/out.txt", { source = "/app/log", destination = "logs" }]
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


def test_every_field_of_schema_1_3_is_known():
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


def test_unknown_fields_get_one_warning_naming_them(tmp_path, capsys):
    load(tmp_path, 'flavour = "mint"\n[environment.extra]\nx = 1\n')
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "flavour" in err[0] and "environment.extra" in err[0] and err[0].startswith("warning:")


def test_known_fields_warn_nothing(tmp_path, capsys):
    load(tmp_path, 'schema_version = "1.3"\n[task]\nname = "org/t"\n')
    assert capsys.readouterr().err == ""


def test_a_bad_value_is_one_line_naming_the_field(tmp_path):
    with pytest.raises(UserError, match=r"agent\.network_mode: Input should be 'public', 'no-network' or 'allowlist'"):
        load(tmp_path, '[agent]\nnetwork_mode = "sometimes"\n')


def test_fields_reach_the_task(tmp_path):
    [task] = load(tmp_path, '[agent]\nuser = "agent"\nnetwork_mode = "no-network"\n'
                            '[solution]\nenv = { S = "1" }\n[environment.healthcheck]\ncommand = "true"\n')
    assert task.agent_user == "agent" and task.users == {"[agent] user": "agent"}
    assert task.network_modes == ("no-network", "public") and task.data["networks"]["agent"] == "no-network"
    assert task.data["solution_env"] == {"S": "1"} and task.data["healthcheck"]["command"] == "true"


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
