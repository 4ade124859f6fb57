"""`agentcompass env check modal` and `list envs` through the fake SDK (tests/modal_sdk.py): each credential
source, ~/.modal.toml read and refused as the SDK does, one-line failures; plus the opt-in live first steps."""

from __future__ import annotations

from pathlib import Path

import pytest

import fake_modal
from modal_sdk import SECRET, live, modal_cli, needs_bwrap, private_config, real_modal  # noqa: F401  (fixtures)
from modal_sdk import fake as fake  # noqa: F401,PLC0414  (fixture)

pytestmark = needs_bwrap


# -- env check modal --------------------------------------------------------------------------------
def env_check(modal_cli, tmp_path, *extra: str, env: dict[str, str] | None = None):
    run, sdk = modal_cli("env", "check", "modal", *extra, env=env)
    return run, [tuple(c["args"]) for c in sdk if c["call"] == "Client.from_credentials"], sdk


def modal_toml(tmp_path: Path, text: str) -> dict[str, str]:
    path = tmp_path / "profiles.toml"
    path.write_text(text)
    return {"MODAL_CONFIG_PATH": str(path)}


PROFILE = '[work]\nactive = true\ntoken_id = "ak-file"\ntoken_secret = "' + SECRET + '"\nenvironment = "dev"\n'


@pytest.mark.parametrize("source", ["config", "environment", "profile"])
def test_env_check_names_each_credential_source_alone(modal_cli, tmp_path, source):
    extra = ("--config", str(private_config(tmp_path))) if source == "config" else ()
    env = {"config": {"MY_MODAL_SECRET": SECRET},
           "environment": {"MODAL_TOKEN_ID": "ak-env", "MODAL_TOKEN_SECRET": SECRET},
           "profile": modal_toml(tmp_path, PROFILE)}[source]
    run, used, sdk = env_check(modal_cli, tmp_path, *extra, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    expected = {"config": ("--config " + str(tmp_path / "private.yaml"), "ak-private"),
                "environment": ("MODAL_TOKEN_ID and MODAL_TOKEN_SECRET", "ak-env"),
                "profile": ("profile 'work' of " + str(tmp_path / "profiles.toml"), "ak-file")}[source]
    assert run.stdout.startswith("env modal: ready") and expected[0] in run.stdout
    assert used == [(expected[1], SECRET)] and any(c["call"] == "Client.hello" for c in sdk)
    assert SECRET not in run.stdout + run.stderr
    if source == "profile":
        assert f"environment: dev (from profile 'work' of {tmp_path / 'profiles.toml'})" in run.stdout
    assert "workspace: fake-workspace" in run.stdout and "server: " in run.stdout


TWO_PROFILES = ('[work]\ntoken_id = "ak-work"\ntoken_secret = "as-work"\nserver_url = "https://work.invalid"\n'
                'environment = "dev"\n[home]\ntoken_id = "ak-home"\ntoken_secret = "as-home"\n')


@pytest.mark.parametrize("source", ["config", "environment"])
def test_explicit_tokens_work_with_any_modal_toml_and_ignore_its_profile(modal_cli, tmp_path, source):
    """Two profiles, none active: the SDK's _check_config refuses the file ("No Modal profile is active") even
    for Client.from_credentials; explicit tokens are no profile's, so neither that nor its server_url applies."""
    extra = ("--config", str(private_config(tmp_path))) if source == "config" else ()
    env = {**modal_toml(tmp_path, TWO_PROFILES), "MY_MODAL_SECRET": SECRET,
           **({"MODAL_TOKEN_ID": "ak-env", "MODAL_TOKEN_SECRET": SECRET} if source == "environment" else {})}
    run, used, sdk = env_check(modal_cli, tmp_path, *extra, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "server: Modal default (from the SDK's default (the profile's settings go with its own tokens only))" in run.stdout
    assert "environment: the workspace default" in run.stdout
    [lookup_client] = [c for c in sdk if c["call"] == "Client.hello"]
    assert lookup_client["args"][0].endswith("@default")  # the client did not take the profile's server_url
    results = tmp_path / "results"
    run, sdk = modal_cli("run", "demo", "oracle", "none", "--env", "modal", "--results-dir", str(results), *extra, env=env)
    assert run.returncode == 0, run.stderr
    assert all(c["kwargs"]["app"].endswith("@default") for c in sdk if c["call"] == "Sandbox.create")


def test_the_sdks_own_refusal_of_modal_toml_is_one_line(modal_cli, tmp_path):
    """Profile tokens from a file with two active profiles: the SDK refuses it; we say so in one line."""
    text = TWO_PROFILES.replace("[work]\n", "[work]\nactive = true\n").replace("[home]\n", "[home]\nactive = true\n")
    run, _ = modal_cli("run", "demo", "oracle", "none", "--env", "modal", "--results-dir", str(tmp_path / "r"),
                       env=modal_toml(tmp_path, text))
    assert run.returncode == 2 and "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert "modal profile activate" in run.stderr


def test_a_malformed_modal_toml_does_not_stop_config_tokens(modal_cli, tmp_path):
    run, _ = modal_cli("run", "demo", "oracle", "none", "--env", "modal", "--results-dir", str(tmp_path / "r"),
                       "--config", str(private_config(tmp_path)),
                       env={**modal_toml(tmp_path, "[work\ntoken_id = 1"), "MY_MODAL_SECRET": SECRET})
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr


def test_the_fake_reads_modal_toml_as_the_sdk_does(fake, tmp_path, monkeypatch):
    """What the SDK refuses at import (a malformed file) and at from_credentials (_check_config), the fake refuses."""
    monkeypatch.setenv("MODAL_CONFIG_PATH", str(modal_toml(tmp_path, "[work\n")["MODAL_CONFIG_PATH"]))
    with pytest.raises(fake.exception.InvalidError, match="Error when reading the modal configuration"):
        fake.imported()
    monkeypatch.setenv("MODAL_CONFIG_PATH", str(modal_toml(tmp_path, TWO_PROFILES)["MODAL_CONFIG_PATH"]))
    fake.imported()
    with pytest.raises(fake.exception.InvalidError, match="No Modal profile is active"):
        fake.Client.from_credentials("ak-x", "as-x")


def test_env_check_with_every_source_uses_the_config_file(modal_cli, tmp_path):
    env = {"MY_MODAL_SECRET": SECRET, "MODAL_TOKEN_ID": "ak-env", "MODAL_TOKEN_SECRET": "as-env",
           **modal_toml(tmp_path, PROFILE)}
    run, used, _ = env_check(modal_cli, tmp_path, "--config", str(private_config(tmp_path)), env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert used == [("ak-private", SECRET)] and "--config" in run.stdout and SECRET not in run.stdout + run.stderr


def test_env_check_without_credentials_exits_1_with_the_setup_steps(modal_cli, tmp_path):
    run, used, _ = env_check(modal_cli, tmp_path)
    assert run.returncode == 1 and used == []
    assert "not ready" in run.stdout
    for step in ("modal setup", "modal token set", "MODAL_TOKEN_ID", "--config FILE"):
        assert step in run.stdout


def test_env_check_with_rejected_credentials_exits_1(modal_cli, tmp_path):
    run, _, _ = env_check(modal_cli, tmp_path, env={"MODAL_TOKEN_ID": fake_modal.REJECTED_TOKEN,
                                                    "MODAL_TOKEN_SECRET": SECRET})
    assert run.returncode == 1 and "rejected" in run.stdout and SECRET not in run.stdout + run.stderr


@pytest.mark.parametrize("text, expected", [
    ("[a]\ntoken_id = 'x'\n[b\n", "is not valid TOML"),
    ("[a]\nactive = true\n[b]\nactive = true\n", "several Modal profiles active"),
    ("[a]\ntoken_id = 'x'\ntoken_secret = 'y'\n[b]\ntoken_id = 'x'\ntoken_secret = 'y'\n", "none is active"),
])
def test_a_modal_toml_the_sdk_would_refuse_is_one_line(modal_cli, tmp_path, text, expected):
    run, used, _ = env_check(modal_cli, tmp_path, env=modal_toml(tmp_path, text))
    assert run.returncode == 1 and expected in run.stdout and used == [] and "Traceback" not in run.stderr
    again, _ = modal_cli("run", "demo", "oracle", "none", "--env", "modal", "--results-dir", str(tmp_path / "o"),
                         env=modal_toml(tmp_path, text))
    assert again.returncode == 2 and expected in again.stderr and len(again.stderr.strip().splitlines()) == 1


def test_list_envs_shows_readiness_without_the_network(modal_cli, tmp_path):
    run, sdk = modal_cli("list", "envs", env={"MODAL_TOKEN_ID": "ak-x", "MODAL_TOKEN_SECRET": "as-x"})
    assert run.returncode == 0, run.stderr
    assert [line for line in run.stdout.splitlines() if line.strip().startswith("modal")][0].endswith("[ready]")
    assert sdk == []  # no client was made
    bare, _ = modal_cli("list", "envs")
    assert "not ready: credentials: none found; see `agentcompass env check modal`" in bare.stdout


@pytest.mark.modal
def test_live_env_check_then_validate_demo(live, cli, tmp_path):
    """A new user's first two steps on real Modal: the credentials work, then the demo validates."""
    check = cli("env", "check", "modal")
    assert check.returncode == 0 and "Modal accepted the credentials" in check.stdout, check.stdout + check.stderr
    env = {"AGENTCOMPASS_BASE_IMAGE": "python:3.11-slim-bookworm"}  # the public base, as a user has it
    run = cli("validate", "demo", "--env", "modal", "--results-dir", str(tmp_path), env=env, timeout=1800)
    assert run.returncode == 0, run.stdout + run.stderr
