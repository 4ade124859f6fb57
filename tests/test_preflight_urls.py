"""The model preflight asks the URL the agent's own calls will go to, in the agent's API shape, and a refusal
names it. An Anthropic preset with `--model-base-url http://HOST:PORT/v1` was checked at /v1/v1/messages, a 404
a real server gives, and the run refused as "does not know model" though the agent's calls would have worked."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

from agentcompass.core.errors import UserError
from agentcompass.gateway.check import check_endpoint
from agentcompass.core.models import check_model
from agentcompass.core.schema import ModelConfig
from conftest import REPO

ROUTES = {"/v1/messages", "/v1/chat/completions", "/v1/responses"}  # what a real server serves; all else 404s


@contextmanager
def endpoint(known: set[str] = ROUTES) -> Iterator[tuple[str, list[str]]]:
    """A server that answers 200 on the real API routes only, recording each path asked."""
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers.get("content-length") or 0))
            path = self.path.split("?")[0]
            asked.append(path)
            ok = path in known
            reply = ({"id": "m", "type": "message", "role": "assistant", "model": "x", "content": [{"type": "text", "text": "OK"}],
                      "stop_reason": "end_turn", "usage": {"input_tokens": 3, "output_tokens": 1}} if path.endswith("messages")
                     else {"id": "c", "object": "chat.completion", "created": 0, "model": "x", "choices": [
                         {"index": 0, "message": {"role": "assistant", "content": "OK"}, "finish_reason": "stop"}],
                           "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}) if ok \
                else {"type": "error", "error": {"type": "not_found_error", "message": f"no route {path}"}}
            data = json.dumps(reply).encode()
            self.send_response(200 if ok else 404)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", asked
    finally:
        server.shutdown()
        server.server_close()


def preset(file: str, **changes) -> ModelConfig:
    return ModelConfig(**{**yaml.safe_load((REPO / f"conf/models/{file}.yaml").read_text()), "api_key": "sk-t", **changes})


@pytest.mark.parametrize("suffix", ["", "/v1", "/v1/"])
@pytest.mark.parametrize("kind", ["messages", "litellm"])
def test_an_anthropic_presets_check_asks_v1_messages_with_or_without_v1(suffix, kind):
    with endpoint() as (url, asked):
        model = preset("claude-sonnet-4-5", base_url=url + suffix)
        if kind == "litellm":  # mini_swe_agent's calls go through litellm, and so does its check
            check_model(model)
        else:  # claude_code and opencode (anthropic) call through the gateway
            assert check_endpoint(model, "messages") == f"{url}/v1/messages"
    assert asked == ["/v1/messages"]


@pytest.mark.parametrize(("kind", "path"), [("chat", "/v1/chat/completions"), ("responses", "/v1/responses")])
def test_openai_shapes_are_checked_at_their_own_route(kind, path):
    """codex speaks only the Responses API: its check asks /v1/responses, not chat completions."""
    with endpoint() as (url, asked):
        assert check_endpoint(preset("gpt-5.5", base_url=f"{url}/v1"), kind) == f"{url}{path}"
    assert asked == [path]


@pytest.mark.parametrize("kind", ["messages", "litellm"])
def test_a_refusal_names_the_url_it_tried(kind):
    with endpoint(known=set()) as (url, asked), pytest.raises(UserError) as refused:
        model = preset("claude-sonnet-4-5", base_url=f"{url}/v1", name="anthropic/claude-sonnet-4-5-nope")
        check_model(model) if kind == "litellm" else check_endpoint(model, "messages")
    assert f"POST {url}/v1/messages" in str(refused.value) and "does not know model" in str(refused.value)
