"""A preset's own endpoint, up, found and down: what the cost benchmark's idempotent set-up script does for its
self-hosted GLM endpoint (create only if missing, reuse the weights volume, wait for it, print the URL), as three
commands, plus the lookup that lets a run name the endpoint (`--model-base-url modal:NAME`) instead of its URL."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from agentcompass.core.errors import UserError

if TYPE_CHECKING:
    from agentcompass.core.schema import ModalEndpoint, ModelConfig
    from agentcompass.endpoints.modal_api import EndpointState, ModalEndpoints

NAMED = "modal:"  # a base URL naming a Modal Endpoint: modal:NAME


def spec_of(model: "ModelConfig", preset: str) -> "ModalEndpoint":
    spec = model.endpoint.modal if model.endpoint else None
    if spec is None:
        raise UserError(f"preset '{preset}' says nothing of serving it: add endpoint: {{modal: {{name: NAME, model: "
                        "HF_REPO_ID}}}} to it (or to a private --config under model:); see docs/endpoints.md")
    return spec


def connect(env_settings: Any, environment: str | None) -> "ModalEndpoints":
    from agentcompass.endpoints.modal_api import ModalEndpoints
    from agentcompass.providers.modal.setup import CREDENTIALS_HINT, modal_credentials

    token_id = env_settings.get("token_id") if isinstance(env_settings, dict) else None
    token_secret = env_settings.get("token_secret") if isinstance(env_settings, dict) else None
    credentials = modal_credentials(str(token_id) if token_id else None, str(token_secret) if token_secret else None)
    if credentials is None:
        raise UserError(f"endpoint: {CREDENTIALS_HINT}")
    configured = env_settings.get("environment_name") if isinstance(env_settings, dict) else None
    return ModalEndpoints(credentials, environment or configured)


def hourly(model: "ModelConfig") -> str:
    rate = model.pricing.hourly_usd if model.pricing else None
    return f"${rate:.2f}/h while it serves (pricing.hourly_usd)" if rate else "cost per hour unknown (no pricing.hourly_usd)"


def said(state: "EndpointState") -> str:
    auth = "; requests need a Modal proxy token (Modal-Key, Modal-Secret headers)" if state.requires_proxy_auth else ""
    return f"{state.name} ({state.endpoint_id}) is {state.status}" + (f" at {state.base_url}" if state.url else "") + auth


def up(model: "ModelConfig", preset: str, api: "ModalEndpoints", wait_s: float, poll_s: float) -> int:
    """Create the endpoint unless it exists (a failed one is replaced), wait until it is live; 0 when it is."""
    spec = spec_of(model, preset)
    state = api.find(spec.name)
    if state is not None and state.status == "failed":
        print(f"endpoint {spec.name} ({state.endpoint_id}) failed earlier: stopping it and creating it again", flush=True)
        api.stop(state.endpoint_id)
        state = None
    if state is None:
        source = f" with the weights in volume '{spec.volume}'" if spec.volume else " (Modal fetches the weights)"
        print(f"creating endpoint {spec.name} for {spec.model}{source}", flush=True)
        endpoint_id = api.create(spec)
    else:
        print(f"endpoint {spec.name} exists ({state.endpoint_id}, {state.status}): reusing it", flush=True)
        endpoint_id = state.endpoint_id
    seen: list[str] = []

    def progress(now: "EndpointState", waited: float) -> None:
        if not seen or seen[-1] != now.status:  # one line per status, so a log stays short
            print(f"  [{waited:5.0f} s] {now.status}", file=sys.stderr, flush=True)
            seen.append(now.status)
    final = api.wait_live(endpoint_id, wait_s, poll_s, progress)
    if not final.live:
        if final.status in ("failed", "cancelled", "cancelling", "stopped"):
            print(f"endpoint {spec.name} is {final.status}; see Modal's dashboard or `modal endpoint logs "
                  f"{final.endpoint_id}`, then run `agentcompass endpoint up {preset} --env modal` again", file=sys.stderr)
            return 1
        print(f"endpoint {spec.name} is still {final.status} after {wait_s:.0f} s; `agentcompass endpoint status "
              f"{preset} --env modal` tells when it is live (it keeps provisioning)", file=sys.stderr)
        return 1
    print(said(final))
    print(f"cost: {hourly(model)}")
    print(f"use it: agentcompass run BENCHMARK HARNESS {preset} --model-base-url {NAMED}{spec.name} --env ENV")
    return 0


def status(model: "ModelConfig", preset: str, api: "ModalEndpoints") -> int:
    """One line: up (and at what cost per hour) or not; 0 when live, 1 otherwise."""
    name = spec_of(model, preset).name
    state = api.find(name)
    if state is None:
        print(f"{name} is not up (no endpoint of that name); `agentcompass endpoint up {preset} --env modal`")
    else:
        print(said(state) + (f"; {hourly(model)}" if state.live else ""))
    return 0 if state is not None and state.live else 1


def down(model: "ModelConfig", preset: str, api: "ModalEndpoints") -> int:
    """Stop it; an endpoint already gone is not an error (down is idempotent, as up is)."""
    name = spec_of(model, preset).name
    state = api.find(name)
    if state is not None:
        api.stop(state.endpoint_id)
    print(f"{name} is not up: nothing to stop" if state is None
          else f"stopped {name} ({state.endpoint_id}); its weights volume stays for the next `up`")
    return 0


def resolve_named(model: dict[str, Any], env_settings: Any) -> dict[str, Any]:
    """A run's model whose base_url names an endpoint (modal:NAME): the endpoint's URL, and its app for `report
    --bill modal` when the preset names none. UserError when it is not live."""
    base = str(model.get("base_url") or "")
    if not base.startswith(NAMED):
        return model
    name = base.removeprefix(NAMED)
    endpoint = ((model.get("endpoint") or {}).get("modal") or {})
    state = connect(env_settings, endpoint.get("environment") if endpoint.get("name") == name else None).find(name)
    if state is None or not state.live:
        why = "does not exist" if state is None else f"is {state.status}"
        raise UserError(f"--model-base-url {base}: the Modal endpoint {name} {why}; bring it up with `agentcompass "
                        f"endpoint up PRESET --env modal` (or wait until `endpoint status` says live)")
    pricing = dict(model.get("pricing") or {})
    if not pricing.get("modal_app") and not pricing.get("modal_tags"):
        pricing["modal_app"] = state.app_id
    return {**model, "base_url": state.base_url, "pricing": pricing}
