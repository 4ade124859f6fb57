"""A scripted OpenAI-compatible chat-completions endpoint on 127.0.0.1, for offline tests.

mini-swe-agent 2.x (its `mini` config and LitellmModel) expects tool calls to a `bash`
function, so every reply carries one. The reply to a request is chosen by how many
assistant turns the conversation already holds, so the same script serves every trial
and every job of a sweep. The server records each request (body and Authorization
header) and the usage it returned, so tests compute expected figures from what really
went over the wire. agentcompass's model preflight (a 1-token request before the first
trial) is answered with plain text and recorded apart, in `checks`.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


UNAUTHORIZED = {"error": {"message": "Incorrect API key provided.", "type": "invalid_request_error",
                          "code": "invalid_api_key"}}

CONTEXT_TOO_LONG = {"error": {"message": "This model's maximum context length is 8192 tokens. However, your messages "
                                         "resulted in 9001 tokens. Please reduce the length of the messages.",
                              "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}


@dataclass
class Recorded:
    body: dict[str, Any]
    authorization: str
    status: int
    usage: dict[str, Any] | None = None  # what a 200 reply reported


@dataclass
class FakeLLM:
    commands: list[str]  # the bash command of each step; the last one repeats
    api_key: str | None = None  # when set, any other bearer token gets a 401
    failures: list[int] = field(default_factory=list)  # statuses returned, in order, before any success
    revoke_after: int | None = None  # after this many successes every request gets a 401 (a revoked key)
    outage_after: int | None = None  # after this many successes every request gets a 503 (an outage)
    context_window_after: int | None = None  # a conversation with this many assistant turns is "too long" (400)
    delay_s: float = 0.0  # how long each reply takes to "generate": calls in flight at once overlap in time
    requests: list[Recorded] = field(default_factory=list)
    checks: list[Recorded] = field(default_factory=list)  # preflight requests (max_tokens 1)
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

    def reply(self, body: dict[str, Any], authorization: str) -> tuple[int, dict[str, Any]]:
        if body.get("max_tokens") == 1 and "tools" not in body:
            return self.check_reply(body, authorization)
        time.sleep(self.delay_s)  # outside the lock: the server answers concurrent requests concurrently
        with self._lock:
            if self.failures:
                status = self.failures.pop(0)
                self.requests.append(Recorded(body, authorization, status))
                return status, {"error": {"message": f"scripted failure {status}", "type": "server_error"}}
            if self.outage_after is not None and len(self.successes) >= self.outage_after:
                self.requests.append(Recorded(body, authorization, 503))
                return 503, {"error": {"message": "scripted outage", "type": "server_error"}}
            revoked = self.revoke_after is not None and len(self.successes) >= self.revoke_after
            if revoked or self.rejects(authorization):
                self.requests.append(Recorded(body, authorization, 401))
                return 401, UNAUTHORIZED
            step = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
            if self.context_window_after is not None and step >= self.context_window_after:
                self.requests.append(Recorded(body, authorization, 400))
                return 400, CONTEXT_TOO_LONG
            command = self.commands[min(step, len(self.commands) - 1)]
            usage = self.usage_for(step)
            self.requests.append(Recorded(body, authorization, 200, usage))
        return 200, {
            "id": f"chatcmpl-{step}",
            "object": "chat.completion",
            "created": 1700000000,
            "model": body.get("model", "fake"),
            "choices": [{
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": f"Step {step}: running a command.",
                    "tool_calls": [{
                        "id": f"call_{step}",
                        "type": "function",
                        "function": {"name": "bash", "arguments": json.dumps({"command": command})},
                    }],
                },
            }],
            "usage": usage,
        }

    def rejects(self, authorization: str) -> bool:
        return self.api_key is not None and authorization != f"Bearer {self.api_key}"

    def check_reply(self, body: dict[str, Any], authorization: str) -> tuple[int, dict[str, Any]]:
        status = 401 if self.rejects(authorization) else 200
        with self._lock:
            self.checks.append(Recorded(body, authorization, status))
        if status == 401:
            return 401, UNAUTHORIZED
        return 200, {"id": "chatcmpl-check", "object": "chat.completion", "created": 1700000000,
                     "model": body.get("model", "fake"),
                     "choices": [{"index": 0, "finish_reason": "length", "message": {"role": "assistant", "content": "OK"}}],
                     "usage": {"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10}}

    @property
    def successes(self) -> list[Recorded]:
        return [r for r in self.requests if r.status == 200]


class FakeLLMServer:
    """Serves a FakeLLM on a random port; use as a context manager."""

    def __init__(self, llm: FakeLLM) -> None:
        self.llm = llm
        fake = llm

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except json.JSONDecodeError:
                    body = {}
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    status, payload = 404, {"error": {"message": f"no route {self.path}"}}
                else:
                    status, payload = fake.reply(body, self.headers.get("Authorization", ""))
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> "FakeLLMServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
