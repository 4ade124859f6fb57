"""A scripted model endpoint on 127.0.0.1 behind the gateway in tests: OpenAI chat completions and
Responses, Anthropic messages, each plain or streamed (SSE), with the usage of every reply recorded
as sent, so tests compare the gateway's records with what really went over the wire."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

KEY = "sk-upstream-SECRET-4f9d1c"


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class ScriptedUpstream:
    key: str = KEY
    statuses: list[int] = field(default_factory=list)  # answered in order before any success (e.g. 503)
    gate: threading.Event | None = None  # set: a stream pauses after its first event until the gate opens
    cut_stream: bool = False  # streams end after their first event, without the rest (a broken connection)
    received: list[Received] = field(default_factory=list)
    usages: list[dict[str, Any]] = field(default_factory=list)  # the usage object of each reply, as sent
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def usage(self, kind: str) -> dict[str, Any]:
        """Distinct counts per reply, so sums cannot match by accident."""
        with self._lock:
            n = len(self.usages) + 1
            prompt, cached, out = 1000 + 137 * n, 64 * n, 40 + 11 * n
            if kind == "chat":
                usage = {"prompt_tokens": prompt, "completion_tokens": out, "total_tokens": prompt + out,
                         "prompt_tokens_details": {"cached_tokens": cached}}
            elif kind == "responses":
                usage = {"input_tokens": prompt, "output_tokens": out, "total_tokens": prompt + out,
                         "input_tokens_details": {"cached_tokens": cached}}
            else:  # Anthropic: input_tokens excludes cache reads and writes
                usage = {"input_tokens": prompt, "output_tokens": out, "cache_read_input_tokens": cached,
                         "cache_creation_input_tokens": 5 * n}
            self.usages.append(usage)
            return usage

    def events(self, kind: str, body: dict[str, Any]) -> list[dict[str, Any] | str]:
        if kind == "chat":
            base = {"id": "c1", "object": "chat.completion.chunk", "model": body["model"]}
            chunks: list[dict[str, Any] | str] = [
                {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}}]},
                {**base, "choices": [{"index": 0, "delta": {"content": "lo"}, "finish_reason": "stop"}]},
            ]
            if (body.get("stream_options") or {}).get("include_usage"):
                chunks.append({**base, "choices": [], "usage": self.usage(kind)})
            return [*chunks, "[DONE]"]
        if kind == "responses":
            return [{"type": "response.created", "response": {"id": "r1", "status": "in_progress"}},
                    {"type": "response.output_text.delta", "delta": "Hello"},
                    {"type": "response.completed", "response": {"id": "r1", "status": "completed",
                                                                "usage": self.usage(kind)}}]
        usage = self.usage(kind)
        start = {k: v for k, v in usage.items() if k != "output_tokens"} | {"output_tokens": 1}
        return [{"type": "message_start", "message": {"id": "m1", "role": "assistant", "usage": start}},
                {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello"}},
                {"type": "content_block_stop", "index": 0},
                {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                 "usage": {"output_tokens": usage["output_tokens"]}},
                {"type": "message_stop"}]

    def reply(self, kind: str, body: dict[str, Any]) -> dict[str, Any]:
        usage = self.usage(kind)
        if kind == "chat":
            return {"id": "c1", "object": "chat.completion", "model": body["model"], "usage": usage,
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello"}, "finish_reason": "stop"}]}
        if kind == "responses":
            return {"id": "r1", "object": "response", "status": "completed", "usage": usage,
                    "output": [{"type": "message", "content": [{"type": "output_text", "text": "Hello"}]}]}
        return {"id": "m1", "type": "message", "role": "assistant", "usage": usage,
                "content": [{"type": "text", "text": "Hello"}], "stop_reason": "end_turn"}


KINDS = {"/v1/chat/completions": "chat", "/v1/responses": "responses", "/v1/messages": "messages"}


def handler_for(script: ScriptedUpstream) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            headers = {k.lower(): v for k, v in self.headers.items()}
            script.received.append(Received(self.path, headers, body))
            kind = KINDS.get(self.path.partition("?")[0])
            given = headers.get("x-api-key") or headers.get("authorization", "").removeprefix("Bearer ")
            if kind is None:
                return self.send(404, {"error": {"message": f"no {self.path}"}})
            if given != script.key:  # echoes the key it got, as some servers do
                return self.send(401, {"error": {"message": f"Incorrect API key provided: {given}"}})
            if script.statuses:
                return self.send(script.statuses.pop(0), {"error": {"message": "overloaded"}})
            if not body.get("stream"):
                return self.send(200, script.reply(kind, body))
            self.send(200, None)
            for number, event in enumerate(script.events(kind, body)):
                data = event if isinstance(event, str) else json.dumps(event)
                name = "" if kind == "chat" or isinstance(event, str) else f"event: {event['type']}\n"
                self.wfile.write(f"{name}data: {data}\n\n".encode())
                self.wfile.flush()
                if number == 0 and script.cut_stream:
                    return
                if number == 0 and script.gate is not None:
                    script.gate.wait(30)

        def send(self, status: int, payload: dict[str, Any] | None) -> None:
            """A JSON reply, or (payload None) the head of an event stream that ends when the connection does."""
            data = json.dumps(payload).encode() if payload is not None else b""
            self.send_response(status)
            for name, value in ({"Content-Type": "application/json", "Content-Length": str(len(data))} if payload is not None
                                else {"Content-Type": "text/event-stream", "Connection": "close"}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


@contextmanager
def serving(script: ScriptedUpstream) -> Iterator[str]:
    """The scripted endpoint on a free port of 127.0.0.1; yields its root URL (no /v1)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(script))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
