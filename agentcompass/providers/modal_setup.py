"""Modal credentials and readiness: where a run's token comes from, by the SDK's own rules, and whether
Modal accepts it (`agentcompass env check modal`). Never prints or returns a secret's value in a message."""

from __future__ import annotations

import importlib.util
import os
import tomllib
from pathlib import Path
from typing import Any, NamedTuple

from agentcompass.errors import UserError
from agentcompass.providers.remote import one_line
from agentcompass.readiness import Readiness

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


def modal_config_path() -> Path:
    return Path(os.environ.get("MODAL_CONFIG_PATH") or Path.home() / ".modal.toml")


def modal_credentials(token_id: str | None, token_secret: str | None,
                      config_source: str = "environments.modal in a --config file") -> ModalCredentials | None:
    """The first source that has both: config, environment, ~/.modal.toml (by the SDK's own profile rules:
    MODAL_PROFILE, else the one marked active, else `default`). UserError for a file the SDK would refuse."""
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
    if profile.get("token_id") and profile.get("token_secret"):
        environment = profile.get("environment")
        return ModalCredentials(str(profile["token_id"]), str(profile["token_secret"]),
                                f"profile '{name}' of {path}", str(environment) if environment else None)
    return None


def modal_readiness(provider: Any, live: bool, config_source: str = "") -> Readiness:
    """Which credentials and settings a run would use (their sources, never their values) and, when
    `live`, whether Modal accepts them (the client's hello)."""
    report = Readiness()
    if importlib.util.find_spec("modal") is None:
        return report.fail("the modal SDK is not installed", "pip install 'agentcompass[modal]'")
    try:
        credentials = provider._credentials(config_source)
    except UserError as exc:
        return report.fail(one_line(exc), *SETUP_STEPS)
    if credentials is None:
        return report.fail(f"credentials: none found (no --config tokens, MODAL_TOKEN_ID/MODAL_TOKEN_SECRET unset, "
                           f"no token in {modal_config_path()})", *SETUP_STEPS)
    s = provider.settings
    report.facts.append(f"credentials: {credentials.source}")
    report.facts.append(f"environment: {s.environment_name or credentials.environment or 'the workspace default'}"
                        + (" (from the profile)" if not s.environment_name and credentials.environment else ""))
    report.facts.append(f"app: {s.app_name} (created when missing)")
    if not live:
        return report
    import modal

    try:
        client = modal.Client.from_credentials(credentials.token_id, credentials.token_secret)
        client.hello()
    except modal.exception.AuthError as exc:
        return report.fail(f"Modal rejected the credentials from {credentials.source} ({one_line(exc)[:200]})",
                           *SETUP_STEPS)
    except (modal.exception.Error, OSError) as exc:
        return report.fail(f"cannot reach Modal ({one_line(exc)[:200]})", "check the network, then run this again")
    report.facts.append("Modal accepted the credentials (client hello)")
    return report
