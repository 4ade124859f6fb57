"""The Gemini API of the scripted model endpoint (tests/fake_llm_server.py): `models/M:generateContent`,
`:streamGenerateContent?alt=sse` and `:countTokens` under /v1beta or /v1 (after any prefix: /t/TOKEN/v1beta).

The same script plays the agent: a reply calls the client's shell tool (gemini-cli's `run_shell_command`, or any
tool SHELL_TOOLS names) through a `functionCall` part. The usage is the script's step-dependent counts split the
way Gemini reports them: thoughts apart from the candidates (both billed as output), the cached part inside the
prompt; the recorded usage (OpenAI chat's shape) has completion = candidates + thoughts, so tests compute the
expected figures from it whatever the API.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Iterator
from urllib.parse import parse_qsl, urlsplit

if TYPE_CHECKING:
    from fake_llm_server import Action, FakeLLM

GEMINI = "gemini"
CALL = re.compile(r"/v1(beta)?/models/(?P<model>[^/:]+):(?P<method>generateContent|streamGenerateContent|countTokens)$")
STATUS_NAMES = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 429: "RESOURCE_EXHAUSTED", 503: "UNAVAILABLE"}


def call_of(path: str) -> tuple[str, str] | None:
    """(model, method) of a Gemini API path, or None."""
    match = CALL.search(urlsplit(path).path)
    return (match["model"], match["method"]) if match else None


def key_of(headers: Any, path: str) -> str:
    """The key a Gemini client sends (its header, else ?key=), as the recorder writes every key: `Bearer KEY`."""
    key = headers.get("x-goog-api-key") or dict(parse_qsl(urlsplit(path).query)).get("key")
    return f"Bearer {key}" if key else headers.get("Authorization", "")


def assistant_turns(body: dict[str, Any]) -> int:
    return sum(1 for content in body.get("contents") or [] if isinstance(content, dict) and content.get("role") == "model")


def tool_schemas(body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for tool in body.get("tools") or []:
        for declaration in tool.get("functionDeclarations") or tool.get("function_declarations") or []:  # litellm's
            schema = (declaration.get("parametersJsonSchema") or declaration.get("parameters_json_schema")
                      or declaration.get("parameters") or {})
            found.append((declaration.get("name", ""), schema))
    return found


def usage_metadata(usage: dict[str, Any]) -> dict[str, int]:
    completion = usage["completion_tokens"]
    thoughts = completion // 3  # a part of the output was thought, billed as output
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    metadata = {"promptTokenCount": usage["prompt_tokens"], "candidatesTokenCount": completion - thoughts,
                "thoughtsTokenCount": thoughts, "totalTokenCount": usage["prompt_tokens"] + completion}
    return {**metadata, "cachedContentTokenCount": cached} if cached else metadata


def reply(body: dict[str, Any], action: "Action", model: str) -> dict[str, Any]:
    from fake_llm_server import shell_call

    parts: list[dict[str, Any]] = [{"text": action.text}]
    if action.command is not None:
        name, arguments = shell_call(GEMINI, body, action.command)
        parts.append({"functionCall": {"name": name, "args": arguments}})
    return {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": usage_metadata(action.usage), "modelVersion": model, "responseId": f"resp-{action.step}"}


def chunks(body: dict[str, Any], action: "Action", model: str) -> Iterator[tuple[None, dict[str, Any]]]:
    """The reply streamed as Gemini streams: the text first (the usage so far: the prompt), then the function call
    with the finish reason and the whole usage."""
    whole = reply(body, action, model)
    candidate = whole["candidates"][0]
    parts = candidate["content"]["parts"]
    head = {"modelVersion": model, "responseId": whole["responseId"]}
    first = {"promptTokenCount": whole["usageMetadata"]["promptTokenCount"],
             "totalTokenCount": whole["usageMetadata"]["promptTokenCount"]}
    yield None, {**head, "candidates": [{"content": {"role": "model", "parts": parts[:1]}, "index": 0}],
                 "usageMetadata": first}
    yield None, {**head, "candidates": [{"content": {"role": "model", "parts": parts[1:] or [{"text": ""}]},
                                         "finishReason": "STOP", "index": 0}],
                 "usageMetadata": whole["usageMetadata"]}


def error(status: int, payload: dict[str, Any]) -> dict[str, Any]:
    message = (payload.get("error") or {}).get("message", "")
    return {"error": {"code": status, "message": message, "status": STATUS_NAMES.get(status, "INTERNAL")}}


def check_text(body: dict[str, Any]) -> str | None:
    """A request with no tools that asks for JSON (a CLI's own side questions) gets an empty object, not prose."""
    config = body.get("generationConfig") or {}
    return "{}" if config.get("responseMimeType") == "application/json" else None


def serve(handler: Any, fake: "FakeLLM", body: dict[str, Any]) -> None:
    """Answer one Gemini API request on a FakeLLMServer handler."""
    from fake_llm_server import Action

    model, method = call_of(handler.path) or ("", "")
    if method == "countTokens":
        return handler.send_json(200, {"totalTokens": 100})
    status, action = fake.decide(GEMINI, body, key_of(handler.headers, handler.path))
    if not isinstance(action, Action):
        return handler.send_json(status, error(status, action))
    if action.step < 0 and (text := check_text(body)) is not None:
        action = Action(action.step, None, text, action.usage)
    if method == "streamGenerateContent":
        return handler.send_events(chunks(body, action, model), done=False)
    handler.send_json(status, reply(body, action, model))
