"""Modal credentials and readiness: where a run's token comes from, by the SDK's own rules, and whether
Modal accepts it (`agentcompass env check modal`). Never prints or returns a secret's value in a message."""

from __future__ import annotations

import importlib.util
import os
import sys
import tomllib
from pathlib import Path
from typing import Any, NamedTuple

from agentcompass.core import secret_values
from agentcompass.core.errors import UserError
from agentcompass.providers.remote import one_line
from agentcompass.core.readiness import Readiness

CREDENTIALS_HINT = ("no Modal credentials: set environments.modal.token_id and token_secret in a private --config file, "
                    "or MODAL_TOKEN_ID and MODAL_TOKEN_SECRET, or run `modal setup` (~/.modal.toml)")
SETUP_STEPS = (
    "run `modal setup` (opens a browser), or `modal token set --token-id ID --token-secret SECRET`: "
    "both write ~/.modal.toml",
    "or export MODAL_TOKEN_ID and MODAL_TOKEN_SECRET",
    "or put environments: {modal: {token_id: ${oc.env:MY_MODAL_ID}, token_secret: ${oc.env:MY_MODAL_SECRET}}} "
    "in a private file and pass --config FILE",
)


class ModalCredentials(NamedTuple):
    token_id: str
    token_secret: str
    source: str  # where they came from, for `env check`; never the values
    environment: str | None = None  # the ~/.modal.toml profile's environment, the SDK's default for lookups
    profile: dict[str, Any] | None = None  # the profile the tokens came from; None: explicit tokens (config, env)

    @property
    def explicit(self) -> bool:
        return self.profile is None


class ModalSetting(NamedTuple):
    value: str | None
    source: str


def import_modal(credentials: ModalCredentials) -> Any:
    """The modal SDK, imported as it should see its configuration. The SDK reads ~/.modal.toml once, at import,
    and applies its active profile (server_url, environment) and its checks (`_check_config`: one profile
    active) even to Client.from_credentials; explicit tokens (config, environment) are not that profile's, so
    for them it is imported with no file at all: only MODAL_* variables apply, and any ~/.modal.toml works."""
    if "modal" in sys.modules:
        return sys.modules["modal"]
    saved = os.environ.get("MODAL_CONFIG_PATH")
    if credentials.explicit:
        os.environ["MODAL_CONFIG_PATH"] = os.devnull
    try:
        import modal
    except Exception as exc:  # InvalidError: a file the SDK refuses
        raise UserError(f"the modal SDK refused its configuration ({one_line(exc)[:200]}); fix {modal_config_path()} "
                        "or run `modal token set`") from None
    finally:
        if saved is None:
            os.environ.pop("MODAL_CONFIG_PATH", None)
        else:
            os.environ["MODAL_CONFIG_PATH"] = saved
    return modal


def modal_setting(name: str, credentials: ModalCredentials, configured: str | None = None,
                  configured_source: str = "") -> ModalSetting:
    """A setting as the SDK resolves it (modal.config: MODAL_<NAME> over the profile), after ours: the
    configured value, then the environment variable, then (profile tokens only) the profile's."""
    if configured:
        return ModalSetting(configured, configured_source)
    variable = f"MODAL_{name.upper()}"
    if os.environ.get(variable):
        return ModalSetting(os.environ[variable], variable)
    if credentials.profile and credentials.profile.get(name):
        return ModalSetting(str(credentials.profile[name]), credentials.source)
    return ModalSetting(None, "the SDK's default" + (" (the profile's settings go with its own tokens only)"
                                                      if credentials.explicit and modal_config_path().is_file() else ""))


def modal_config_path() -> Path:
    return Path(os.environ.get("MODAL_CONFIG_PATH") or Path.home() / ".modal.toml")


def modal_credentials(token_id: str | None, token_secret: str | None,
                      config_source: str = "environments.modal in a --config file") -> ModalCredentials | None:
    """The first source that has both: config, environment, ~/.modal.toml (by the SDK's own profile rules:
    MODAL_PROFILE, else the one marked active, else `default`). UserError for a file the SDK would refuse."""
    secret_values.register_tree([token_id, token_secret, os.environ.get("MODAL_TOKEN_ID")], under_secret=True)
    if token_id and token_secret:
        return ModalCredentials(token_id, token_secret, config_source)
    env_id, env_secret = os.environ.get("MODAL_TOKEN_ID"), os.environ.get("MODAL_TOKEN_SECRET")
    if env_id and env_secret:
        return ModalCredentials(env_id, env_secret, "the MODAL_TOKEN_ID and MODAL_TOKEN_SECRET environment variables")
    path = modal_config_path()
    try:
        profiles = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError:
        return None
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path} is not valid TOML ({one_line(exc)}); fix it or run `modal token set`") from exc
    if not all(isinstance(p, dict) for p in profiles.values()):
        raise UserError(f"{path} must hold one [section] per profile; fix it or run `modal token set`")
    active = [name for name, p in profiles.items() if p.get("active") is True]
    wanted = os.environ.get("MODAL_PROFILE")
    if len(active) > 1:
        raise UserError(f"{path} marks several Modal profiles active ({', '.join(active)}); "
                        "run `modal profile activate NAME`")
    if not wanted and not active and len(profiles) > 1:
        raise UserError(f"{path} has several Modal profiles and none is active; run `modal profile activate NAME` "
                        "or set MODAL_PROFILE")
    name = wanted or (active[0] if active else "default")
    profile = profiles.get(name) or {}
    secret_values.register_tree([profile.get("token_id"), profile.get("token_secret")], under_secret=True)  # scrubbed by value
    if profile.get("token_id") and profile.get("token_secret"):
        environment = profile.get("environment")
        return ModalCredentials(str(profile["token_id"]), str(profile["token_secret"]),
                                f"profile '{name}' of {path}", str(environment) if environment else None, profile)
    return None


def modal_readiness(provider: Any, live: bool, config_source: str = "") -> Readiness:
    """Which credentials and settings a run would use (their sources, never their values) and, when
    `live`, whether Modal accepts them (the client's hello)."""
    report = Readiness()
    if importlib.util.find_spec("modal") is None:
        from agentcompass.core.install import pip_install

        return report.fail("the modal SDK is not installed", pip_install("modal"))
    try:
        credentials = provider._credentials(config_source)
    except UserError as exc:
        return report.fail(one_line(exc), *SETUP_STEPS)
    if credentials is None:
        return report.fail(f"credentials: none found (no --config tokens, MODAL_TOKEN_ID/MODAL_TOKEN_SECRET unset, "
                           f"no token in {modal_config_path()})", *SETUP_STEPS)
    s = provider.settings
    report.facts.append(f"credentials: {credentials.source}")
    server = modal_setting("server_url", credentials)
    environment = modal_setting("environment", credentials, s.environment_name, "environment_name in the env settings")
    report.facts.append(f"server: {server.value or 'Modal default'} (from {server.source})")
    report.facts.append(f"environment: {environment.value or 'the workspace default'} (from {environment.source})")
    report.facts.append(f"app: {s.app_name} (created when missing)")
    report.facts.append("sandbox CPU: a task's cpus (vCPUs) / 2 = Modal cores, capped at that; "
                        f"ready_timeout {s.ready_timeout}s for scheduling")
    if not live:
        return report
    try:
        modal = import_modal(credentials)
    except UserError as exc:
        return report.fail(one_line(exc), *SETUP_STEPS)
    try:
        client = modal.Client.from_credentials(credentials.token_id, credentials.token_secret)
        client.hello()
        workspace = modal.Workspace.from_context(client=client)
        name = getattr(workspace, "name", None)  # WorkspaceNameLookup: read once the workspace is hydrated
        hydrate = getattr(workspace, "hydrate", None)
        if name is None and callable(hydrate):
            name = getattr(hydrate() or workspace, "name", None)
    except modal.exception.AuthError as exc:
        return report.fail(f"Modal rejected the credentials from {credentials.source} ({one_line(exc)[:200]})",
                           *SETUP_STEPS)
    except modal.exception.InvalidError as exc:
        return report.fail(f"the modal SDK refused its configuration ({one_line(exc)[:200]})", *SETUP_STEPS)
    except (modal.exception.Error, OSError) as exc:
        return report.fail(f"cannot reach Modal ({one_line(exc)[:200]})", "check the network, then run this again")
    report.facts.append(f"workspace: {name or 'unknown'} (Modal accepted the credentials)")
    return report
