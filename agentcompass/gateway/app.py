"""The model gateway's HTTP side: a Starlette app that forwards an agent's model calls upstream.

Each request is checked for a trial's token, under the trial's and the run's spend caps (caps), against the
API's allowlist of fields and headers (policy), rewritten to the preset's upstream model and tier, sent with
the real key, and its reply metered from the upstream's own usage. Streams (SSE) are
relayed event by event as they arrive; the usage is read from the events on the way through.
"""

from __future__ import annotations

import copy
import json
import re
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from agentcompass.core.merge import deep_merge
from agentcompass.gateway import gemini
from agentcompass.gateway.policy import Refused, RequestPolicy, admit
from agentcompass.gateway.tiers import WHOLE_FIELDS, cleared_fields, remove_path  # noqa: F401 (server.py)

if TYPE_CHECKING:
    import httpx
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response

# (method, path after /v1/) -> (API shape, kind of metered call; None: forwarded, not a model call)
ROUTES: dict[tuple[str, str], tuple[str, str | None]] = {
    ("POST", "chat/completions"): ("openai", "chat"),
    ("POST", "responses"): ("openai", "responses"),
    ("POST", "messages"): ("anthropic", "messages"),
    ("POST", "messages/count_tokens"): ("anthropic", None),
}
CLIENT_HEADERS = ("anthropic-version", "anthropic-beta", "openai-beta", "accept")  # passed upstream (policy checks them)
DROPPED_REPLY_HEADERS = {"content-length", "content-encoding", "transfer-encoding", "connection", "keep-alive",
                         "set-cookie"}
ANTHROPIC_VERSION = "2023-06-01"
THINKING_ON = ("enabled", "adaptive")  # the thinking types that take `display`
EVENT_END = re.compile(rb"\r?\n\r?\n")
DONE = re.compile(rb"^data: ?\[DONE\]", re.MULTILINE)  # the end of an OpenAI chat stream
STREAM_ENDS = ("response.completed", "response.incomplete", "response.failed")  # Responses events with usage


class CallRecorder(Protocol):
    """One trial's meter (agentcompass.gateway.server.TrialMeter)."""

    policy: RequestPolicy

    def over_cap(self) -> str | None: ...

    def refused(self, reason: str) -> None: ...

    def begin(self) -> int | None: ...

    def record(self, seconds: float, status: int, tokens: tuple[int, int, int, int] | None) -> None: ...

    def end(self, call: int) -> None: ...


@dataclass(frozen=True)
class Upstream:
    """Where calls go and what every request gets on the way."""

    shape: str  # openai | anthropic | gemini
    base_url: str  # OpenAI: the URL ending in /v1; Anthropic, Gemini: the root that /v1/messages, /v1beta/... go after
    model: str  # the model's name at the endpoint
    key: str | None = field(repr=False)
    tier: dict[str, Any] = field(default_factory=dict)  # the tier's fields, set on every request
    cleared: frozenset[tuple[str, ...]] = frozenset()  # fields other tiers set: removed from what the client sent
    connect_timeout_s: float = 10.0
    request_timeout_s: float = 600.0
    # The preset's model.params.extra_headers (e.g. a Modal endpoint's proxy token, Modal-Key / Modal-Secret):
    # sent upstream on every call, never shown to the agent, whose own headers cannot replace them.
    extra_headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    def url(self, path: str) -> str:
        # OpenAI's base ends in /v1; a Gemini path names its version (v1beta, v1), as the client called it.
        return f"{self.base_url}/{path}" if self.shape in ("openai", "gemini") else f"{self.base_url}/v1/{path}"

    def headers(self, sent: Any) -> dict[str, str]:
        headers = {"content-type": "application/json", "accept-encoding": "identity"}
        headers.update({name: sent[name] for name in CLIENT_HEADERS if name in sent})
        if self.shape == "anthropic":
            headers.setdefault("anthropic-version", ANTHROPIC_VERSION)
            if self.key:
                headers["x-api-key"] = self.key
        elif self.shape == "gemini":
            if self.key:
                headers["x-goog-api-key"] = self.key  # never in the URL, where logs and error echoes keep it
        elif self.key:
            headers["authorization"] = f"Bearer {self.key}"
        headers.update({name.lower(): value for name, value in self.extra_headers})
        return headers

    def scrub(self, content: bytes) -> bytes:
        """An error body that echoes the key (some servers quote what they got) goes back without it."""
        return content.replace(self.key.encode(), b"***") if self.key else content


def rewrite(body: dict[str, Any], upstream: Upstream, kind: str | None) -> tuple[dict[str, Any], bool]:
    """The request as the upstream gets it: its model, the tier whatever the client sent, and (an OpenAI
    stream) a final usage chunk; returns it and whether that usage chunk was asked for on the client's behalf."""
    body = copy.deepcopy(body)
    body["model"] = upstream.model
    if kind is None:
        return body, False
    for path in upstream.cleared:
        remove_path(body, path)
    tier = dict(upstream.tier)
    if kind == "responses" and "reasoning_effort" in tier:  # the Responses API spells it reasoning.effort
        tier["reasoning"] = {"effort": tier.pop("reasoning_effort")}
    shown = (body.get("thinking") or {}).get("display") if isinstance(body.get("thinking"), dict) else None
    for name in WHOLE_FIELDS & tier.keys():
        body.pop(name, None)
    body = deep_merge(body, tier)
    if kind == "messages":
        thinking_consistent(body, shown)
    options = body.get("stream_options") if isinstance(body.get("stream_options"), dict) else {}
    asked = kind == "chat" and bool(body.get("stream")) and not options.get("include_usage")
    if asked:
        body["stream_options"] = {**options, "include_usage": True}
    return body, asked


def thinking_consistent(body: dict[str, Any], shown: Any) -> None:
    """The rest of an Anthropic request agrees with its thinking: the client's `display` kept where thinking is
    on; context edits that clear thinking blocks (Claude Code sends clear_thinking_20251015) dropped where
    it is off, as the API refuses them without thinking."""
    thinking = body.get("thinking")
    on = isinstance(thinking, dict) and thinking.get("type") in THINKING_ON
    if on and shown is not None and "display" not in thinking:
        body["thinking"] = {**thinking, "display": shown}
    management = body.get("context_management")
    if on or not isinstance(management, dict) or not isinstance(management.get("edits"), list):
        return
    edits = [e for e in management["edits"] if not str((e or {}).get("type", "")).startswith("clear_thinking")]
    if edits:
        body["context_management"] = {**management, "edits": edits}
    elif set(management) <= {"edits"}:
        body.pop("context_management")
    else:
        body["context_management"] = {k: v for k, v in management.items() if k != "edits"}


def token_counts(kind: str, usage: Any) -> tuple[int, int, int, int] | None:
    """(input, output, cache reads, cache writes) from an upstream's usage object; reads and writes count as
    input too (Anthropic reports them apart from input_tokens: they are added in, and priced apart)."""
    if kind == "gemini":
        return gemini.token_counts(usage)
    if not isinstance(usage, dict):
        return None

    def number(key: str, within: Any = usage) -> int:
        value = within.get(key) if isinstance(within, dict) else None
        return int(value) if isinstance(value, (int, float)) else 0

    if kind == "chat":
        return (number("prompt_tokens"), number("completion_tokens"),
                number("cached_tokens", usage.get("prompt_tokens_details")), 0)
    if kind == "responses":
        return number("input_tokens"), number("output_tokens"), number("cached_tokens", usage.get("input_tokens_details")), 0
    read, written = number("cache_read_input_tokens"), number("cache_creation_input_tokens")
    return number("input_tokens") + read + written, number("output_tokens"), read, written


class StreamUsage:
    """The usage a stream reports, from whichever events carry it."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.usage: dict[str, Any] | None = None
        self.finished = False  # its last event came: a stream that ends without it was cut off

    def see_event(self, event: bytes) -> dict[str, Any] | None:
        """Note what the event says; returns its JSON payload, if any."""
        data = event_data(event)
        if data is not None:
            self.see(data)
        elif self.kind == "chat" and DONE.search(event):
            self.finished = True
        return data

    def see(self, data: dict[str, Any]) -> None:
        if self.kind == "gemini":  # every chunk carries the usage so far; the last, the whole reply's
            self.usage = data.get("usageMetadata") if isinstance(data.get("usageMetadata"), dict) else self.usage
            self.finished = self.finished or gemini.finished(data)
            return
        if data.get("type") in STREAM_ENDS or data.get("type") == "message_stop":
            self.finished = True
        if self.kind == "chat" and isinstance(data.get("usage"), dict):
            self.usage = data["usage"]  # the final chunk (stream_options.include_usage)
        elif self.kind == "responses" and data.get("type") in STREAM_ENDS:
            self.usage = (data.get("response") or {}).get("usage") or self.usage
        elif self.kind == "messages" and data.get("type") == "message_start":
            self.usage = dict((data.get("message") or {}).get("usage") or {})
        elif self.kind == "messages" and data.get("type") == "message_delta" and isinstance(data.get("usage"), dict):
            # Cumulative counts: output_tokens so far, and input counts when the server revises them.
            self.usage = {**(self.usage or {}), **{k: v for k, v in data["usage"].items() if v is not None}}

    def tokens(self) -> tuple[int, int, int, int] | None:
        return token_counts(self.kind, self.usage)


async def sse_events(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """Whole server-sent events (each with its blank line), as soon as each is complete."""
    buffer = b""
    async for chunk in chunks:
        buffer += chunk
        while (end := EVENT_END.search(buffer)) is not None:
            yield buffer[: end.end()]
            buffer = buffer[end.end():]
    if buffer:
        yield buffer


def event_data(event: bytes) -> dict[str, Any] | None:
    """An event's JSON payload (its data: lines), or None ([DONE], comments, other text)."""
    lines = [line[5:].removeprefix(b" ") for line in event.splitlines() if line.startswith(b"data:")]
    try:
        value = json.loads(b"\n".join(lines)) if lines else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def is_usage_only(data: dict[str, Any]) -> bool:
    return data.get("choices") == [] and isinstance(data.get("usage"), dict)


def failure(shape: str, status: int, message: str, kind: str = "invalid_request_error") -> "Response":
    """An error in the shape the client speaks."""
    from starlette.responses import JSONResponse

    if shape == "gemini":
        return JSONResponse(gemini.error_body(status, message), status_code=status)
    body = ({"type": "error", "error": {"type": kind, "message": message}} if shape == "anthropic"
            else {"error": {"message": message, "type": kind, "code": None}})
    return JSONResponse(body, status_code=status)


def reply_headers(reply: "httpx.Response") -> dict[str, str]:
    return {k: v for k, v in reply.headers.items() if k.lower() not in DROPPED_REPLY_HEADERS}


def token_of(request: "Request") -> str:
    """The trial's token: from the path (/t/TOKEN/v1/...), else the key the client sends."""
    if "token" in request.path_params:
        return str(request.path_params["token"])
    auth = request.headers.get("authorization", "")
    return auth[7:].strip() if auth.lower().startswith("bearer ") else request.headers.get("x-api-key", "")


def build_app(upstream: Upstream, trial_of: Callable[[str], CallRecorder | None]) -> "Starlette":
    import anyio
    import httpx
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    client: httpx.AsyncClient | None = None

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        nonlocal client
        timeout = httpx.Timeout(upstream.request_timeout_s, connect=upstream.connect_timeout_s)
        async with httpx.AsyncClient(timeout=timeout, limits=httpx.Limits(max_connections=None)) as client:
            yield

    async def forward(request: Request) -> Response:
        path = request.path_params["path"]
        if gemini.call_of(request.method, path) is not None:  # google-genai 2+ calls the Gemini API's /v1
            return await forward_gemini(request, "v1")
        shape, kind = ROUTES.get((request.method, path), (upstream.shape, None))
        trial = trial_of(token_of(request))
        if trial is None:
            return failure(shape, 401, "agentcompass gateway: unknown or released trial token", "authentication_error")
        if path == "models" and request.method == "GET":
            return JSONResponse({"object": "list", "has_more": False, "data": [
                {"id": upstream.model, "object": "model", "type": "model", "display_name": upstream.model,
                 "created": 0, "owned_by": "agentcompass"}]})
        if (request.method, path) not in ROUTES:
            return failure(shape, 404, f"agentcompass gateway: no {request.method} /v1/{path} here; it serves "
                                       "/v1/chat/completions, /v1/responses, /v1/messages and /v1/models", "not_found_error")
        if shape != upstream.shape:
            return failure(shape, 400, f"agentcompass gateway: model '{upstream.model}' is served by an "
                                       f"{upstream.shape}-compatible endpoint and this gateway does not translate "
                                       f"{shape} requests to it; use a client that speaks the {upstream.shape} API")
        capped = trial.over_cap()
        if capped is not None:  # the agent is being stopped; this call and every later one is refused
            return failure(shape, 400, f"agentcompass gateway: {capped}; no further model calls in this attempt",
                           "spend_cap_reached")
        try:
            sent = await request.json()
        except ValueError:
            sent = None
        if not isinstance(sent, dict):
            return failure(shape, 400, "agentcompass gateway: the request body is not a JSON object")
        try:
            sent = admit(kind or "count_tokens", request.url.query, request.headers, sent, trial.policy)
        except Refused as refused:
            trial.refused(str(refused))
            return failure(shape, refused.status, str(refused))
        body, asked_usage = rewrite(sent, upstream, kind)
        url = upstream.url(path) + (f"?{request.url.query}" if request.url.query else "")  # admitted: ?beta=true
        return await send(shape, kind, trial, url, body, upstream.headers(request.headers), asked_usage)

    async def forward_gemini(request: Request, version: str = gemini.API_VERSION) -> Response:
        """The Gemini API (agentcompass.gateway.gemini), forwarded to the version the client called."""
        path, query = request.path_params["path"], request.url.query
        trial = trial_of(str(request.path_params.get("token") or gemini.token_of(request.headers, query)))
        if trial is None:
            return failure("gemini", 401, "agentcompass gateway: unknown or released trial token")
        own = gemini.own_reply(request.method, version, path, upstream)
        if own is not None:
            return JSONResponse(own[1], status_code=own[0])
        capped = trial.over_cap()
        if capped is not None:
            return failure("gemini", 400, f"agentcompass gateway: {capped}; no further model calls in this attempt")
        try:
            sent = await request.json()
        except ValueError:
            sent = None
        if not isinstance(sent, dict):
            return failure("gemini", 400, "agentcompass gateway: the request body is not a JSON object")
        try:
            url, body, metered = gemini.forwarded(version, path, query, sent, upstream, trial.policy)
        except Refused as refused:
            trial.refused(str(refused))
            return failure("gemini", refused.status, str(refused))
        return await send("gemini", "gemini" if metered else None, trial, url, body, upstream.headers({}), False)

    async def send(shape: str, kind: str | None, trial: CallRecorder, url: str, body: dict[str, Any],
                   headers: dict[str, str], asked_usage: bool) -> Response:
        """Forward one admitted request and meter its reply (a stream as it is relayed)."""
        assert client is not None
        start = time.monotonic()

        def record(status: int, tokens: tuple[int, int, int, int] | None = None) -> None:
            if kind is not None:
                trial.record(time.monotonic() - start, status, tokens)

        call, streamed = trial.begin(), False
        if call is None:  # under a spend cap, a bounded number of calls at once: a cap is overshot by at most those
            return failure(shape, 429, "agentcompass gateway: too many model calls of this attempt at once under a "
                                       "spend cap; try again when one has ended", "rate_limit_error")
        try:
            try:
                reply = await client.send(client.build_request("POST", url, json=body, headers=headers), stream=True)
            except httpx.TimeoutException as exc:
                record(504)
                return failure(shape, 504, f"agentcompass gateway: the model endpoint did not answer in time "
                                           f"({type(exc).__name__})", "api_error")
            except httpx.TransportError as exc:
                record(502)
                return failure(shape, 502, f"agentcompass gateway: cannot reach the model endpoint "
                                           f"({type(exc).__name__}: {exc})", "api_error")
            streaming = reply.headers.get("content-type", "").startswith("text/event-stream")
            if kind is not None and reply.status_code == 200 and streaming:
                streamed = True  # the relay records it and ends it
                return StreamingResponse(relay(reply, kind, asked_usage, record, lambda: trial.end(call)),
                                         status_code=200, headers=reply_headers(reply))
            try:
                content = await reply.aread()
            except httpx.TransportError as exc:
                record(502)
                return failure(shape, 502, f"agentcompass gateway: the model endpoint broke off its reply "
                                           f"({type(exc).__name__})", "api_error")
            finally:
                await reply.aclose()
            ok = 200 <= reply.status_code < 300
            usage = json_object(content).get("usageMetadata" if kind == "gemini" else "usage")
            tokens = token_counts(kind, usage) if ok and kind else None
            record(reply.status_code, tokens)
            return Response(content if ok else upstream.scrub(content), status_code=reply.status_code,
                            headers=reply_headers(reply))
        finally:
            if not streamed:
                trial.end(call)

    async def relay(reply: httpx.Response, kind: str, asked_usage: bool,
                    record: Callable[[int, tuple[int, int, int, int] | None], None],
                    end: Callable[[], None]) -> AsyncIterator[bytes]:
        usage = StreamUsage(kind)
        status = 499  # the client went away before the end (nginx's code for it): an error, not the endpoint's
        try:
            async for event in sse_events(reply.aiter_bytes()):
                data = usage.see_event(event)
                if asked_usage and data is not None and is_usage_only(data):
                    continue  # the client did not ask for it: its stream stays as it would have been
                yield event
            status = 200 if usage.finished else 502  # the endpoint ended the stream before its last event
        except httpx.TransportError:
            status = 502  # the endpoint broke off: the client sees a cut stream
        finally:
            try:
                record(status, usage.tokens() if status == 200 else None)
            finally:
                end()
                with anyio.CancelScope(shield=True):
                    await reply.aclose()

    paths = ["/t/{token}/v1/{path:path}", "/v1/{path:path}"]
    gemini_paths = [f"/t/{{token}}/{gemini.API_VERSION}/{{path:path}}", f"/{gemini.API_VERSION}/{{path:path}}"]
    routes = [Route(p, forward, methods=["GET", "POST"]) for p in paths]
    routes += [Route(p, forward_gemini, methods=["GET", "POST"]) for p in gemini_paths]
    return Starlette(routes=routes, lifespan=lifespan)


def json_object(content: bytes) -> dict[str, Any]:
    try:
        value = json.loads(content)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
