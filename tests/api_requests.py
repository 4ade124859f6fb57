"""Is this a request the real API accepts? Checked with the official SDKs' own request types.

`anthropic` and `openai` publish their request bodies as TypedDicts (what their clients send); pydantic
validates a body against them, every nested union and literal included. The SDK types say nothing of
keys they do not list, so each check also refuses a top-level key the API does not know (an extension
a self-hosted server takes, e.g. vLLM's chat_template_kwargs, is allowed by name), and adds the rules
the APIs state in prose and enforce with a 400: a thinking budget of 1024 or more and below max_tokens,
clear_thinking context edits only with thinking on, no `minimal` reasoning effort with the web_search
tool (openai/codex#3559).
"""

from __future__ import annotations

from functools import cache
from typing import Any

import pydantic


@cache
def adapter(kind: str, streaming: bool, beta: bool = False) -> tuple[pydantic.TypeAdapter, frozenset[str]]:
    if kind == "messages":
        from anthropic.types import message_create_params as ga
        from anthropic.types.beta import message_create_params as beta_params

        module: Any = beta_params if beta else ga
    elif kind == "chat":
        from openai.types.chat import completion_create_params as module
    else:
        from openai.types.responses import response_create_params as module
    params = module.MessageCreateParamsStreaming if kind == "messages" and streaming else \
        module.MessageCreateParamsNonStreaming if kind == "messages" else \
        module.CompletionCreateParamsStreaming if kind == "chat" and streaming else \
        module.CompletionCreateParamsNonStreaming if kind == "chat" else \
        module.ResponseCreateParamsStreaming if streaming else module.ResponseCreateParamsNonStreaming
    return pydantic.TypeAdapter(params), params.__required_keys__ | params.__optional_keys__


def problems(kind: str, body: dict[str, Any], beta: bool = False, extensions: frozenset[str] = frozenset()) -> list[str]:
    """What the API would refuse in `body` (kind: messages | chat | responses); [] when nothing.
    `beta`: an Anthropic request sent to /v1/messages?beta=true (Claude Code's), checked against the beta types."""
    types, known = adapter(kind, bool(body.get("stream")), beta)
    found = [f"unknown field {key!r}" for key in body if key not in known and key not in extensions]
    try:
        types.validate_python({k: v for k, v in body.items() if k not in extensions})
    except pydantic.ValidationError as exc:
        found += [f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:5]]
    return found + (messages_rules(body) if kind == "messages" else openai_rules(kind, body))


def messages_rules(body: dict[str, Any]) -> list[str]:
    found = []
    thinking = body.get("thinking")
    on = isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive")
    if isinstance(thinking, dict) and thinking.get("type") == "enabled":
        budget = thinking.get("budget_tokens")
        if not isinstance(budget, int) or budget < 1024 or budget >= body.get("max_tokens", 0):
            found.append(f"thinking.budget_tokens {budget} must be >= 1024 and < max_tokens {body.get('max_tokens')}")
    if isinstance(thinking, dict) and thinking.get("type") == "disabled" and set(thinking) != {"type"}:
        found.append(f"thinking {thinking}: a disabled thinking takes no other field")
    edits = (body.get("context_management") or {}).get("edits") or []
    if not on and any(str(e.get("type", "")).startswith("clear_thinking") for e in edits):
        found.append("context_management clear_thinking edits need thinking enabled")
    if on and body.get("temperature") not in (None, 1):
        found.append(f"temperature {body.get('temperature')} with thinking (only 1)")
    return found


def openai_rules(kind: str, body: dict[str, Any]) -> list[str]:
    effort = (body.get("reasoning") or {}).get("effort") if kind == "responses" else body.get("reasoning_effort")
    tools = [t.get("type") for t in body.get("tools") or [] if isinstance(t, dict)]
    if effort == "minimal" and any(str(t).startswith("web_search") for t in tools):
        return ["reasoning effort 'minimal' with the web_search tool (OpenAI answers 400)"]
    return []
