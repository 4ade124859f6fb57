"""`agentcompass env check local|docker` (modal's is in test_modal_env_check.py, against the fake SDK)."""

from __future__ import annotations

import shutil

import pytest

from conftest import docker_available, skip_or_fail


def test_env_check_local_starts_bubblewrap(cli):
    if shutil.which("bwrap") is None:
        skip_or_fail("bubblewrap is not installed")
    run = cli("env", "check", "local")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "env local: ready" in run.stdout and "bubblewrap starts a sandbox" in run.stdout


def test_env_check_local_without_bubblewrap_but_required(cli, tmp_path):
    run = cli("env", "check", "local", "--config", str(config(tmp_path, "local", "isolation: bwrap")),
              env={"PATH": str(tmp_path)})  # no bwrap on PATH
    assert run.returncode == 1
    assert "not ready" in run.stdout and "apt-get install bubblewrap" in run.stdout


def test_env_check_docker_reports_the_engine(cli):
    reason = docker_available()
    if reason:
        skip_or_fail(reason)
    run = cli("env", "check", "docker")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "engine version" in run.stdout and "storage driver" in run.stdout and "free disk" in run.stdout


def test_env_check_docker_without_an_engine_exits_1_with_steps(cli, tmp_path):
    run = cli("env", "check", "docker", env={"DOCKER_HOST": f"unix://{tmp_path}/no.sock"})
    assert run.returncode == 1
    assert "does not answer" in run.stdout and "DOCKER_HOST" in run.stdout


@pytest.mark.parametrize("args", [["env"], ["env", "chek", "local"], ["env", "check", "nosuch"]])
def test_env_bad_usage_is_one_line_exit_2(cli, args):
    run = cli(*args)
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1, run.stderr


def config(tmp_path, env: str, line: str):
    path = tmp_path / "env.yaml"
    path.write_text(f"environments:\n  {env}:\n    {line}\n")
    return path


def test_env_check_names_an_invalid_setting(cli, tmp_path):
    run = cli("env", "check", "modal", "--config", str(config(tmp_path, "modal", "cpu: -1")))
    assert run.returncode == 1 and "invalid setting env.cpu" in run.stdout, run.stdout + run.stderr
