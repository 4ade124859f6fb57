"""[environment] storage_mb, mcp_servers and skills_dir: honoured where a provider or harness can, else
refused (or, for a disk size no provider here can cap, run with a warning) with one line naming the field."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from agentcompass.providers.docker.provider import storage_lack
from harbor_factory import add_toml, make_recipe, make_task

MCP = '[[environment.mcp_servers]]\nname = "tools"\ntransport = "streamable-http"\nurl = "http://tools:8000/mcp"\n'
SKILLS = '[environment]\nskills_dir = "/skills"\n'


def fields_task(tmp_path: Path, toml_extra: str, dockerfile: str | None = None) -> tuple[Path, Path]:
    dataset, conf = tmp_path / "tasks", tmp_path / "conf"
    add_toml(make_task(dataset, "t", solve="echo ok > /app/ok", dockerfile=dockerfile,
                       test='if [ -f /app/ok ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt'), toml_extra)
    make_recipe(conf, "fields", dataset, runs_on_host=dockerfile is None)
    return dataset, conf


@pytest.mark.parametrize("toml_extra, field", [(MCP, "mcp_servers"), (SKILLS, "skills_dir")])
def test_a_harness_that_cannot_hand_over_the_tools_refuses_the_task(cli, tmp_path, toml_extra, field):
    _, conf = fields_task(tmp_path, toml_extra)
    done = cli("run", "fields", "mini_swe_agent", "openai/some-model", "--env", "local", "--config-dir", str(conf),
               "--results-dir", str(tmp_path / "res"), "--run-name", "r")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert f"[environment] {field}" in lines[0] and "mini_swe_agent harness" in lines[0], lines
    assert not (tmp_path / "res").exists()


def test_the_oracle_runs_a_task_with_tools_it_does_not_need(cli, tmp_path):
    _, conf = fields_task(tmp_path, MCP + SKILLS)
    done = cli("validate", "fields", "--config-dir", str(conf), "--results-dir", str(tmp_path / "res"), "--run-name", "v")
    assert done.returncode == 0, done.stderr


def test_tools_reach_the_task(tmp_path):
    from agentcompass.formats.harbor.format import HarborFormat
    from agentcompass.core.schema import Recipe

    fields_task(tmp_path, MCP + SKILLS)
    [task] = HarborFormat(Recipe(name="h", format="harbor", source={"path": str(tmp_path / "tasks")})).load()
    assert task.agent_tools["skills_dir"] == "/skills"
    [server] = task.agent_tools["mcp_servers"]
    assert (server["name"], server["transport"], server["url"]) == ("tools", "streamable-http", "http://tools:8000/mcp")


# -- storage_mb --------------------------------------------------------------------------------------
@pytest.mark.parametrize("driver, backing, can", [
    ("overlay2", "extfs", False), ("overlay2", "xfs", True), ("btrfs", "btrfs", True), ("zfs", "zfs", True),
    ("vfs", "extfs", False), ("fuse-overlayfs", "extfs", False),
])
def test_which_storage_drivers_cap_a_disk(driver, backing, can):
    """Docker's documented --storage-opt size support, read from the engine's `docker info`."""
    lack = storage_lack({"Driver": driver, "DriverStatus": [["Backing Filesystem", backing], ["Supports d_type", "true"]]})
    assert (lack is None) == can, lack
    if lack:
        assert driver in lack and backing in lack


def test_local_runs_a_disk_size_with_one_warning(cli, tmp_path):
    _, conf = fields_task(tmp_path, "[environment]\nstorage_mb = 5000\n")
    done = cli("run", "fields", "oracle", "none", "--env", "local", "--config-dir", str(conf),
               "--results-dir", str(tmp_path / "res"), "--run-name", "r")
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if "storage_mb" in line]
    assert len(warnings) == 1 and "storage_mb = 5000" in warnings[0] and "local provider cannot cap" in warnings[0], done.stderr


def docker_info() -> dict:
    import docker

    return docker.from_env().info()


@pytest.mark.docker
def test_docker_caps_a_disk_or_says_it_cannot(cli, base_image, tmp_path):
    """This engine's driver decides: a cap the container sees as its root's size, or one warning (or, with
    storage_limit required, a refusal) naming the driver."""
    _, conf = fields_task(tmp_path, "[environment]\nstorage_mb = 700\n", dockerfile=f"FROM {base_image}\nWORKDIR /app\n")
    run = ["--config-dir", str(conf), "--results-dir", str(tmp_path / "res")]
    lack = storage_lack(docker_info())
    required = cli("run", "fields", "oracle", "none", "--env", "docker", *run, "--run-name", f"hs-{uuid.uuid4().hex[:8]}",
                   "--env-params", '{"storage_limit": "required"}')
    done = cli("run", "fields", "oracle", "none", "--env", "docker", *run, "--run-name", f"hs-{uuid.uuid4().hex[:8]}")
    assert done.returncode == 0, done.stderr[-2000:]
    warnings = [line for line in done.stderr.splitlines() if "storage_mb" in line]
    if lack:
        lines = required.stderr.strip().splitlines()
        assert required.returncode == 2 and len(lines) == 1 and "storage_mb = 700" in lines[0], required.stderr
        assert len(warnings) == 1 and "docker provider cannot cap" in warnings[0] and "storage_limit" in warnings[0]
    else:
        assert required.returncode == 0 and warnings == [], (required.stderr, done.stderr)
    [row] = (json.loads(line) for line in next((tmp_path / "res").glob("*/fields__oracle__none__docker/trials.jsonl")).read_text().splitlines())
    assert row["reward"] == 1.0
