"""A scripted model endpoint on 127.0.0.1 (or any host), for offline tests.

It speaks OpenAI chat-completions, the OpenAI Responses API, Anthropic messages and the Gemini API
(tests/fake_llm_gemini.py), each plain or
streamed (server-sent events), and plays an agent through whatever shell tool the client
offers: mini-swe-agent's `bash`, opencode's `bash`, Claude Code's `Bash`, Codex's `shell` /
`exec_command` (the arguments follow the tool's own schema). The reply to a request is chosen by
how many assistant turns the conversation already holds, so the same script serves every trial
and every job of a sweep. With `finish` set, a conversation past the last command gets that plain
text (an installed CLI ends its turn on it); without, the last command repeats (mini-swe-agent
ends on its submit command).

The server records each request (body, the key it carried, as `Bearer KEY` whatever the header)
and the usage it returned, so tests compute expected figures from what really went over the
wire. Requests that offer no tools (agentcompass's 1-token preflight, a CLI's title or quota
requests) are answered with plain text and recorded apart, in `checks`.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

import fake_llm_gemini

UNAUTHORIZED = {"error": {"message": "Incorrect API key provided.", "type": "invalid_request_error",
                          "code": "invalid_api_key"}}

CONTEXT_TOO_LONG = {"error": {"message": "This model's maximum context length is 8192 tokens. However, your messages "
                                         "resulted in 9001 tokens. Please reduce the length of the messages.",
                              "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}
SHELL_TOOLS = ("bash", "shell", "exec_command", "shell_command", "local_shell", "run_shell_command",
               "run_commands")  # compared case-insensitively; the last: Cline's (Kimi Code's is Bash)
CHAT, RESPONSES, MESSAGES = "chat", "responses", "messages"  # the three APIs, by route


@dataclass
class Recorded:
    body: dict[str, Any]
    authorization: str
    status: int
    usage: dict[str, Any] | None = None  # what a 200 reply reported (OpenAI chat's shape, whatever the API)
    api: str = CHAT


@dataclass
class Action:
    """What the scripted agent does in one reply: run `command` in the shell tool, or say `text` and stop."""

    step: int
    command: str | None
    text: str
    usage: dict[str, Any]


@dataclass
class FakeLLM:
    commands: list[str]  # the shell command of each step; the last one repeats unless `finish` is set
    api_key: str | None = None  # when set, any other key gets a 401
    failures: list[int] = field(default_factory=list)  # statuses returned, in order, before any success
    revoke_after: int | None = None  # after this many successes every request gets a 401 (a revoked key)
    outage_after: int | None = None  # after this many successes every request gets a 503 (an outage)
    context_window_after: int | None = None  # a conversation with this many assistant turns is "too long" (400)
    finish: str | None = None  # past the last command: this text, no tool call (the agent's turn ends)
    delay_s: float = 0.0  # each tool-using reply takes this long (a hung endpoint; overlapping calls in flight)
    stall_after: int | None = None  # after this many successes every tool-using request hangs (for stall_s)
    stall_s: float = 600.0
    # A request offering no tools that is no 1-token check (an LLM judge's): its reply text, from the body.
    answer: Any = None  # Callable[[dict], str] | None
    requests: list[Recorded] = field(default_factory=list)
    checks: list[Recorded] = field(default_factory=list)  # requests offering no tools (preflight, titles)
    headers_seen: list[dict[str, str]] = field(default_factory=list)  # every POST's headers, names lower-cased
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @staticmethod
    def usage_for(step: int) -> dict[str, Any]:
        """Distinct, step-dependent counts, so sums cannot match by accident."""
        prompt, cached = 1000 + 137 * step, 64 * step
        completion = 40 + 11 * step
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
        }

    # -- the script --------------------------------------------------------------------------
    def decide(self, api: str, body: dict[str, Any], authorization: str) -> tuple[int, Action | dict[str, Any]]:
        """A status and either the scripted action (200) or an error payload (OpenAI's shape)."""
        if not body.get("tools"):
            return self.check_reply(api, body, authorization)
        if self.delay_s:
            time.sleep(self.delay_s)
        if self.stall_after is not None and len(self.successes) >= self.stall_after:
            time.sleep(self.stall_s)  # the work is done, the model never answers again: the agent hangs
        with self._lock:
            if self.failures:
                status = self.failures.pop(0)
                self.requests.append(Recorded(body, authorization, status, api=api))
                return status, {"error": {"message": f"scripted failure {status}", "type": "server_error"}}
            if self.outage_after is not None and len(self.successes) >= self.outage_after:
                self.requests.append(Recorded(body, authorization, 503, api=api))
                return 503, {"error": {"message": "scripted outage", "type": "server_error"}}
            revoked = self.revoke_after is not None and len(self.successes) >= self.revoke_after
            if revoked or self.rejects(authorization):
                self.requests.append(Recorded(body, authorization, 401, api=api))
                return 401, UNAUTHORIZED
            step = assistant_turns(api, body)
            if self.context_window_after is not None and step >= self.context_window_after:
                self.requests.append(Recorded(body, authorization, 400, api=api))
                return 400, CONTEXT_TOO_LONG
            usage = self.usage_for(step)
            self.requests.append(Recorded(body, authorization, 200, usage, api=api))
        if self.finish is not None and step >= len(self.commands):
            return 200, Action(step, None, self.finish, usage)
        command = self.commands[min(step, len(self.commands) - 1)]
        return 200, Action(step, command, f"Step {step}: running a command.", usage)

    def reply(self, body: dict[str, Any], authorization: str) -> tuple[int, dict[str, Any]]:
        """An OpenAI chat-completions reply (not streamed)."""
        status, action = self.decide(CHAT, body, authorization)
        if not isinstance(action, Action):
            return status, action
        return status, chat_completion(body, action)

    def rejects(self, authorization: str) -> bool:
        return self.api_key is not None and authorization != f"Bearer {self.api_key}"

    def check_reply(self, api: str, body: dict[str, Any], authorization: str) -> tuple[int, Action | dict[str, Any]]:
        status = 401 if self.rejects(authorization) else 200
        if status == 200 and self.answer is not None and body.get("max_tokens") != 1:
            text = self.answer(body)
            # Distinct counts that follow the request and the reply, so a test sums what went over the wire.
            prompt, completion = 100 + len(json.dumps(body)) // 4, 10 + len(text) // 4
            usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
            with self._lock:
                self.checks.append(Recorded(body, authorization, status, usage, api=api))
            return 200, Action(-1, None, text, usage)
        usage = {"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10} if status == 200 else None
        with self._lock:
            self.checks.append(Recorded(body, authorization, status, usage, api=api))
        if status == 401:
            return 401, UNAUTHORIZED
        return 200, Action(-1, None, "OK", usage)

    @property
    def successes(self) -> list[Recorded]:
        return [r for r in self.requests if r.status == 200]


def assistant_turns(api: str, body: dict[str, Any]) -> int:
    if api == "gemini":
        return fake_llm_gemini.assistant_turns(body)
    if api == RESPONSES:
        items = body.get("input") if isinstance(body.get("input"), list) else []
        return sum(1 for item in items if item.get("type") in ("function_call", "custom_tool_call", "local_shell_call"))
    return sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")


def tool_schemas(api: str, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(name, JSON-schema parameters) of every function tool the request offers."""
    if api == "gemini":
        return fake_llm_gemini.tool_schemas(body)
    found = []
    for tool in body.get("tools") or []:
        if api == CHAT:
            function = tool.get("function") or {}
            found.append((function.get("name", ""), function.get("parameters") or {}))
        elif api == MESSAGES:
            found.append((tool.get("name", ""), tool.get("input_schema") or {}))
        else:
            found.append((tool.get("name", "") or tool.get("type", ""), tool.get("parameters") or {}))
    return found


def shell_call(api: str, body: dict[str, Any], command: str) -> tuple[str, dict[str, Any]]:
    """The client's shell tool and arguments that run `command`, shaped by that tool's own schema."""
    tools = {name.lower(): (name, schema) for name, schema in tool_schemas(api, body)}
    chosen = next((tools[n] for n in SHELL_TOOLS if n in tools), None)
    if chosen is None:
        raise ValueError(f"no shell tool among {sorted(tools)}")
    name, schema = chosen
    properties = schema.get("properties") or {}
    arguments: dict[str, Any] = {}
    key = "cmd" if "cmd" in properties and "command" not in properties else "command"
    if (properties.get(key) or {}).get("type") == "array":
        arguments[key] = ["bash", "-lc", command]
    else:
        arguments[key] = command
    if "description" in properties:
        arguments["description"] = "Run a shell command"
    return name, arguments


# -- reply shapes ------------------------------------------------------------------------------
def chat_completion(body: dict[str, Any], action: Action) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": action.text}
    if action.command is not None:
        name, arguments = shell_call(CHAT, body, action.command)
        message["tool_calls"] = [{"id": f"call_{action.step}", "type": "function",
                                  "function": {"name": name, "arguments": json.dumps(arguments)}}]
    return {"id": f"chatcmpl-{action.step}", "object": "chat.completion", "created": 1700000000,
            "model": body.get("model", "fake"),
            "choices": [{"index": 0, "finish_reason": "tool_calls" if action.command is not None else "stop",
                         "message": message}],
            "usage": action.usage}


def chat_chunks(body: dict[str, Any], action: Action) -> Iterator[tuple[str | None, dict[str, Any]]]:
    """A chat completion as streamed chunks: role and text, the tool call, the finish, the usage."""
    reply = chat_completion(body, action)
    message = reply["choices"][0]["message"]
    head = {k: reply[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    yield None, chunk({"role": "assistant", "content": ""})
    yield None, chunk({"content": message["content"]})
    for index, call in enumerate(message.get("tool_calls") or []):
        yield None, chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                           "function": {"name": call["function"]["name"], "arguments": ""}}]})
        yield None, chunk({"tool_calls": [{"index": index, "function": {"arguments": call["function"]["arguments"]}}]})
    yield None, chunk({}, reply["choices"][0]["finish_reason"])
    yield None, {**head, "choices": [], "usage": action.usage}


def anthropic_usage(usage: dict[str, Any]) -> dict[str, int]:
    cached = usage.get("prompt_tokens_details", {}).get("cached_tokens", 0)
    return {"input_tokens": usage["prompt_tokens"] - cached, "cache_read_input_tokens": cached,
            "cache_creation_input_tokens": 0, "output_tokens": usage["completion_tokens"]}


def anthropic_message(body: dict[str, Any], action: Action) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": action.text}]
    if action.command is not None:
        name, arguments = shell_call(MESSAGES, body, action.command)
        content.append({"type": "tool_use", "id": f"toolu_{action.step}", "name": name, "input": arguments})
    return {"id": f"msg_{action.step}", "type": "message", "role": "assistant", "model": body.get("model", "fake"),
            "content": content, "stop_reason": "tool_use" if action.command is not None else "end_turn",
            "stop_sequence": None, "usage": anthropic_usage(action.usage)}


def anthropic_events(body: dict[str, Any], action: Action) -> Iterator[tuple[str | None, dict[str, Any]]]:
    message = anthropic_message(body, action)
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    yield "message_start", {"type": "message_start", "message": start}
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            yield "content_block_start", {"type": "content_block_start", "index": index,
                                          "content_block": {"type": "text", "text": ""}}
            yield "content_block_delta", {"type": "content_block_delta", "index": index,
                                          "delta": {"type": "text_delta", "text": block["text"]}}
        else:
            yield "content_block_start", {"type": "content_block_start", "index": index,
                                          "content_block": {**block, "input": {}}}
            yield "content_block_delta", {"type": "content_block_delta", "index": index,
                                          "delta": {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}}
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
    yield "message_delta", {"type": "message_delta", "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                            "usage": {"output_tokens": usage["output_tokens"]}}
    yield "message_stop", {"type": "message_stop"}


def anthropic_error(status: int, payload: dict[str, Any]) -> dict[str, Any]:
    kind = {401: "authentication_error", 400: "invalid_request_error"}.get(status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": payload.get("error", {}).get("message", "")}}


def responses_reply(body: dict[str, Any], action: Action) -> dict[str, Any]:
    output: list[dict[str, Any]] = [{"type": "message", "id": f"msg_{action.step}", "role": "assistant", "status": "completed",
                                     "content": [{"type": "output_text", "text": action.text, "annotations": []}]}]
    if action.command is not None:
        name, arguments = shell_call(RESPONSES, body, action.command)
        output.append({"type": "function_call", "id": f"fc_{action.step}", "call_id": f"call_{action.step}",
                       "name": name, "arguments": json.dumps(arguments), "status": "completed"})
    usage = action.usage
    return {"id": f"resp_{action.step}", "object": "response", "created_at": 1700000000, "status": "completed",
            "model": body.get("model", "fake"), "output": output,
            "usage": {"input_tokens": usage["prompt_tokens"], "output_tokens": usage["completion_tokens"],
                      "total_tokens": usage["total_tokens"],
                      "input_tokens_details": {"cached_tokens": usage["prompt_tokens_details"]["cached_tokens"]
                                               if "prompt_tokens_details" in usage else 0},
                      "output_tokens_details": {"reasoning_tokens": 0}}}


def responses_events(body: dict[str, Any], action: Action) -> Iterator[tuple[str | None, dict[str, Any]]]:
    reply = responses_reply(body, action)
    yield "response.created", {"type": "response.created", "response": {**reply, "status": "in_progress", "output": []}}
    for index, item in enumerate(reply["output"]):
        yield "response.output_item.added", {"type": "response.output_item.added", "output_index": index, "item": item}
        if item["type"] == "message":
            yield "response.output_text.delta", {"type": "response.output_text.delta", "output_index": index,
                                                 "item_id": item["id"], "content_index": 0,
                                                 "delta": item["content"][0]["text"]}
        yield "response.output_item.done", {"type": "response.output_item.done", "output_index": index, "item": item}
    yield "response.completed", {"type": "response.completed", "response": reply}


SHAPES = {CHAT: (chat_completion, chat_chunks), MESSAGES: (anthropic_message, anthropic_events),
          RESPONSES: (responses_reply, responses_events)}


def route_api(path: str) -> str | None:
    path = path.split("?", 1)[0].rstrip("/")
    if path.endswith("/chat/completions"):
        return CHAT
    if path.endswith("/responses"):
        return RESPONSES
    if path.endswith("/messages"):
        return MESSAGES
    return None


class FakeLLMServer:
    """Serves a FakeLLM on a random port; use as a context manager. `host` 0.0.0.0 lets containers in."""

    def __init__(self, llm: FakeLLM, host: str = "127.0.0.1") -> None:
        self.llm = llm
        fake = llm

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming); model listings some clients ask for
                self.send_json(200, {"object": "list", "data": []})

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except json.JSONDecodeError:
                    body = {}
                if fake_llm_gemini.call_of(self.path) is not None:  # the Gemini API (tests/fake_llm_gemini.py)
                    return fake_llm_gemini.serve(self, fake, body)
                api = route_api(self.path)
                fake.headers_seen.append({k.lower(): v for k, v in self.headers.items()})
                if self.path.split("?", 1)[0].rstrip("/").endswith("/messages/count_tokens"):
                    return self.send_json(200, {"input_tokens": 100})
                if api is None:
                    return self.send_json(404, {"error": {"message": f"no route {self.path}"}})
                key = self.headers.get("x-api-key")
                authorization = f"Bearer {key}" if key else self.headers.get("Authorization", "")
                status, action = fake.decide(api, body, authorization)
                if not isinstance(action, Action):
                    return self.send_json(status, anthropic_error(status, action) if api == MESSAGES else action)
                whole, streamed = SHAPES[api]
                if body.get("stream"):
                    return self.send_events(streamed(body, action), done=api == CHAT)
                self.send_json(status, whole(body, action))

            def send_json(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def send_events(self, events: Iterator[tuple[str | None, dict[str, Any]]], done: bool) -> None:
                """Server-sent events; the connection closes after the last (HTTP/1.0), which ends the stream."""
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.end_headers()
                for event, data in events:
                    head = f"event: {event}\n" if event else ""
                    self.wfile.write(f"{head}data: {json.dumps(data)}\n\n".encode())
                    self.wfile.flush()
                if done:
                    self.wfile.write(b"data: [DONE]\n\n")

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer((host, 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> "FakeLLMServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
