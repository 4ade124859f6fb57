"""The preflight of a harness whose agent calls through the gateway: one small request to the very URL the
gateway will forward that agent's calls to, in the API shape the agent speaks (chat completions, Messages,
Responses), so a refusal names the URL it tried and a URL that works for the agent is never refused.

What it proves, as models.check_model does for litellm: the endpoint answers and does not refuse the key nor
the model. Any other answer (400, 429, 5xx) proves the endpoint reachable and is left to the run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentcompass.core.errors import UserError
from agentcompass.gateway.app import rewrite

if TYPE_CHECKING:
    from agentcompass.core.schema import ModelConfig

PATHS = {"chat": "chat/completions", "responses": "responses", "messages": "messages"}
PROMPT = "Reply with OK."
REPLY_TIMEOUT_S = 60.0  # a queueing self-hosted server may be slow
_checked: set[tuple[str, str]] = set()  # (URL, key) a sweep already checked: one request each


def probe_body(kind: str) -> dict[str, object]:
    """The smallest request of each shape (Responses takes no fewer than 16 output tokens)."""
    if kind == "responses":
        return {"input": PROMPT, "max_output_tokens": 16}
    return {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": 1}


def check_endpoint(model: "ModelConfig", kind: str) -> str:
    """Send the probe to the URL the gateway will use for `kind`; returns that URL, raises UserError on a refusal."""
    import httpx

    from agentcompass.gateway.server import upstream_of
    from agentcompass.core.models import key_hint

    upstream = upstream_of(model)
    url = upstream.url(PATHS[kind])
    seen = (url, upstream.key or "")
    if seen in _checked:
        return url
    body, _ = rewrite(probe_body(kind), upstream, None)  # the model only: a thinking tier would make it costly
    skip = "; or pass --no-model-check to skip this check"
    where = f"POST {url}"
    try:
        reply = httpx.post(url, json=body, headers=upstream.headers({}),
                           timeout=httpx.Timeout(REPLY_TIMEOUT_S, connect=model.connect_timeout_s))
    except httpx.TimeoutException as exc:
        raise UserError(f"the model endpoint did not answer a 1-token request for '{model.name}' ({where}: "
                        f"{type(exc).__name__}); check --model-base-url and the network{skip}") from None
    except httpx.TransportError as exc:
        raise UserError(f"cannot reach the model endpoint for '{model.name}' ({where}: {type(exc).__name__}: "
                        f"{upstream.scrub(str(exc).encode()).decode()}); check --model-base-url and the network{skip}") from None
    detail = " ".join(upstream.scrub(reply.content).decode(errors="replace").split())[:200]
    if reply.status_code in (401, 403):
        raise UserError(f"the model endpoint rejected the API key for '{model.name}' ({where} answered "
                        f"{reply.status_code}: {detail}); {key_hint(model)}{skip}")
    if reply.status_code == 404:
        raise UserError(f"the model endpoint does not know model '{upstream.model}' or this API ({where} answered 404: "
                        f"{detail}); check the model name and --model-base-url{skip}")
    _checked.add(seen)
    return url
