"""The model layer: a model config becomes litellm call arguments, and each reply a cost.

API key precedence: `--model-api-key` > a private `--config` value (both land in
`model.api_key`, see config.finalize) > the preset's `api_key_env` or the provider's
standard variable. The key is handed to litellm only; it is never logged or written.

Cost of a reply, first that applies: the preset's `pricing.hourly_usd` × the time spent
waiting on the endpoint (self-hosted), the preset's per-million-token prices, litellm's
bundled price map; else zero with `cost_known = false`. litellm is imported with
LITELLM_LOCAL_MODEL_COST_MAP set, so it never fetches a price map over the network.

Every request is bounded: `model.connect_timeout_s` (default 10) to connect, then
`model.request_timeout_s` (default 600, litellm's) for the whole reply. Before the first
trial, `check_model` sends one 1-token request, so a missing key, a rejected key or an
unreachable endpoint is one line and exit 2 instead of a run of retried trials.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentcompass.core.calls import CallLog
from agentcompass.core.merge import deep_merge
from agentcompass.core.errors import UserError
from agentcompass.core.progress import Waiting
from agentcompass.core.task import Usage

if TYPE_CHECKING:
    from agentcompass.core.schema import ModelConfig

# The APIs (model.api) agentcompass speaks itself, and where each one's key is read by default (litellm's names).
STANDARD_KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY", "gemini": "GEMINI_API_KEY"}
GEMINI_VERSION = "v1beta"  # the Gemini API's path prefix (what google-genai and gemini-cli call)
extra, extra_modules = "agents", ("litellm",)  # what any model but `none` needs (registry.check_extra)
NO_KEY = "EMPTY"  # what self-hosted OpenAI-compatible servers accept when they check no key
MTOK = 1_000_000
CHECK_REPLY_TIMEOUT_S = 60.0  # the preflight's 1-token reply; a queueing self-hosted server may be slow
_checked: set[tuple[str, str, str]] = set()  # endpoints a sweep already checked: one request each


def import_litellm() -> Any:
    """litellm, set up for offline start-up and quiet errors. Its first import takes seconds of CPU: past a
    second, a person watching is told what the command waits for (core.progress.Waiting)."""
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # read at import time: no price-map download
    with Waiting("litellm, the model client, to load"):
        import litellm

    litellm.suppress_debug_info = True  # no "Give Feedback / Get Help" banners on every error
    return litellm


def litellm_name(model: "ModelConfig") -> str:
    """`provider/model` as litellm routes it: a known provider prefix is kept, else `api` is prepended."""
    if "/" not in model.name:
        return f"{model.api}/{model.name}"
    prefix = model.name.split("/", 1)[0]
    # The providers of STANDARD_KEY_ENV are litellm's for certain: no 6-second import to learn it (a missing
    # key, a refused run name must come in well under 2 s); any other prefix asks litellm itself.
    if prefix in STANDARD_KEY_ENV or prefix in import_litellm().provider_list:
        return model.name
    return f"{model.api}/{model.name}"


def cli_model_name(model: "ModelConfig") -> str:
    """The model id the endpoint knows (an installed CLI's --model): the preset's name without litellm's provider prefix."""
    prefix, _, rest = model.name.partition("/")
    return rest if rest and prefix in ("openai", "anthropic", model.api) else model.name


def key_env_name(model: "ModelConfig") -> str | None:
    """The environment variable the key is read from when no config gives one."""
    return model.api_key_env or STANDARD_KEY_ENV.get(litellm_name(model).split("/", 1)[0])


def api_key(model: "ModelConfig", environ: dict[str, str] | None = None) -> str | None:
    if model.api_key is not None and model.api_key.get_secret_value():
        return model.api_key.get_secret_value()
    env_name = key_env_name(model)
    value = (os.environ if environ is None else environ).get(env_name or "") if env_name else None
    return value or None


def request_fields(model: "ModelConfig") -> dict[str, Any]:
    """What the reasoning tier adds to each request (the schema checked the tier exists)."""
    if model.reasoning is None:
        return {}
    if model.reasoning_map:
        return dict(model.reasoning_map[model.reasoning])
    return {"reasoning_effort": model.reasoning}  # litellm translates this for each provider


def litellm_fields(model: "ModelConfig") -> dict[str, Any]:
    """request_fields as litellm takes them. A Gemini preset's tier is the Gemini API's own fields (the gateway sets
    them as they are), which litellm drops without a word: its `thinking` budget and `reasoning_effort` (a level,
    for Gemini 3) carry the thinking settings instead."""
    fields = request_fields(model)
    config = fields.get("generationConfig")
    if litellm_name(model).split("/", 1)[0] != "gemini" or not isinstance(config, dict):
        return fields
    thinking = config.get("thinkingConfig") or {}
    extra = set(config) - {"thinkingConfig"} | set(thinking) - {"thinkingBudget", "thinkingLevel", "includeThoughts"}
    if extra:
        raise UserError(f"model '{model.name}': tier '{model.reasoning}' sets {', '.join(sorted(extra))}, which only the "
                        "model gateway forwards (litellm takes a Gemini tier's thinkingBudget or thinkingLevel); use a "
                        "harness that calls through the gateway or a tier without them")
    translated = {k: v for k, v in fields.items() if k != "generationConfig"}
    if "thinkingBudget" in thinking:
        translated["thinking"] = {"type": "enabled", "budget_tokens": int(thinking["thinkingBudget"])}
    if "thinkingLevel" in thinking:
        translated["reasoning_effort"] = str(thinking["thinkingLevel"]).lower()
    return translated


def api_base(model: "ModelConfig") -> str | None:
    """The base URL as litellm is given it. Anthropic's is given whole (ROOT/v1/messages): litellm appends
    /v1/messages to anything else, so a base ending in /v1 (as OpenAI clients write it) was asked for
    /v1/v1/messages; the gateway and Claude Code take the root with or without /v1 alike. A Gemini base is given
    with its version (ROOT/v1beta): litellm appends models/M:generateContent to it, where Google's SDKs and the
    gateway add the version to a root themselves."""
    if not model.base_url:
        return None
    route = litellm_name(model).split("/", 1)[0]
    if route == "gemini":
        return f"{gemini_root(model.base_url)}/{GEMINI_VERSION}"
    if route != "anthropic":
        return model.base_url
    root = model.base_url.rstrip("/").removesuffix("/messages").removesuffix("/v1")
    return f"{root}/v1/messages"


def gemini_root(url: str) -> str:
    """The root a Gemini API version goes after, from a base URL written with or without one."""
    return url.rstrip("/").removesuffix(f"/{GEMINI_VERSION}").removesuffix("/v1")


def check_url(model: "ModelConfig") -> str:
    """Where litellm's 1-token check goes, for the preflight's messages (the hosted default when no base_url)."""
    base = api_base(model)
    if base is None:
        return "the provider's default endpoint"
    if litellm_name(model).split("/", 1)[0] == "gemini":
        return f"{base}/models/{cli_model_name(model)}:generateContent"
    return base if base.endswith("/v1/messages") else f"{base.rstrip('/')}/chat/completions"


def completion_kwargs(model: "ModelConfig", environ: dict[str, str] | None = None) -> dict[str, Any]:
    """Keyword arguments for litellm.completion besides model and messages (holds the key: never log it)."""
    kwargs = deep_merge(dict(model.params), litellm_fields(model))
    if model.base_url:
        kwargs["api_base"] = api_base(model)
    key = api_key(model, environ)
    if key is None and model.base_url:
        key = NO_KEY  # the OpenAI client refuses to send without a key, even to a server that checks none
    if key is not None:
        kwargs["api_key"] = key
    return kwargs


def request_timeout(model: "ModelConfig", total_s: float | None = None) -> Any:
    """litellm's `timeout`: connecting bounded by connect_timeout_s, the whole request by request_timeout_s.

    Providers whose litellm client takes no httpx.Timeout get one number, which bounds connecting too."""
    import httpx

    total = model.request_timeout_s if total_s is None else total_s
    provider = litellm_name(model).split("/", 1)[0]
    if import_litellm().utils.supports_httpx_timeout(provider):
        return httpx.Timeout(total, connect=model.connect_timeout_s)
    return total


def key_hint(model: "ModelConfig") -> str:
    env_name = key_env_name(model)
    return "pass --model-api-key, set model.api_key in a private --config" + (f", or set {env_name}" if env_name else "")


def check_model(model: "ModelConfig", request: bool = True) -> None:
    """Before the first trial: a known key variable that is unset fails at once; then (unless `request`
    is off) one 1-token request, failing when the key is rejected, the model unknown or the endpoint
    unreachable. Any other answer (400, 429, 5xx) proves the endpoint reachable and the key not refused."""
    kwargs = completion_kwargs(model)
    if "api_key" not in kwargs and key_env_name(model):
        raise UserError(f"no API key for model '{model.name}': {key_hint(model)}")
    if request:
        send_check_request(model, kwargs)


DEFAULT_CHECK_URL = {"openai": "https://api.openai.com/v1/chat/completions",
                     "anthropic": "https://api.anthropic.com/v1/messages",
                     "gemini": f"https://generativelanguage.googleapis.com/{GEMINI_VERSION}/models/{{model}}:generateContent"}
BASE_URL_ENV = ("OPENAI_BASE_URL", "OPENAI_API_BASE", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_BASE", "GEMINI_API_BASE")


def direct_route(model: "ModelConfig") -> str | None:
    """'openai', 'anthropic' or 'gemini' where the check can ask the endpoint itself, as litellm would route the
    model, without importing litellm (seconds of CPU before a refusal); None where only litellm knows the
    route (another provider prefix, or a base URL litellm takes from the environment)."""
    prefix = model.name.split("/", 1)[0] if "/" in model.name else model.api
    if prefix not in STANDARD_KEY_ENV:
        return None
    if not model.base_url and any(os.environ.get(name) for name in BASE_URL_ENV):
        return None
    return prefix


def send_check_request(model: "ModelConfig", kwargs: dict[str, Any]) -> None:
    where = f" (POST {check_url(model)})" if model.base_url else ""
    skip = "; or pass --no-model-check to skip this check"
    route = direct_route(model)
    seen = (model.name if route else litellm_name(model), str(model.base_url), str(kwargs.get("api_key")))
    if seen in _checked:
        return
    if route is not None:
        send_direct_check(model, route, kwargs, where, skip)
        _checked.add(seen)
        return
    litellm = import_litellm()
    errors = litellm.exceptions
    request = {k: v for k, v in kwargs.items() if k in ("api_base", "api_key", "extra_headers", "api_version")}
    try:
        with Waiting(f"the model endpoint to answer a 1-token check of '{model.name}'"):
            litellm.completion(model=litellm_name(model), messages=[{"role": "user", "content": "Reply with OK."}],
                               max_tokens=1, max_retries=0, drop_params=True,
                               timeout=request_timeout(model, CHECK_REPLY_TIMEOUT_S), **request)
    except (errors.AuthenticationError, errors.PermissionDeniedError) as exc:
        raise UserError(rejected(model, where, error_text(exc, kwargs), skip)) from None
    except errors.NotFoundError as exc:
        raise UserError(unknown_model(model, where, error_text(exc, kwargs), skip)) from None
    except Exception as exc:
        failure = transport_failure(exc)
        if failure is not None:
            raise UserError(unreachable(model, where, failure, error_text(exc, kwargs), skip)) from None
        if "missing credentials" in str(exc).lower():  # litellm's OpenAI client, before sending anything
            raise UserError(f"no API key for model '{model.name}': {key_hint(model)}") from None
        # Any other answer (400, 429, 5xx): the endpoint is reachable and did not refuse the key.
    _checked.add(seen)


def send_direct_check(model: "ModelConfig", route: str, kwargs: dict[str, Any], where: str, skip: str) -> None:
    """The same 1-token request litellm would send (chat completions, or Anthropic's Messages), over httpx."""
    import httpx

    key = kwargs.get("api_key")
    url = check_url(model) if model.base_url else DEFAULT_CHECK_URL[route].format(model=cli_model_name(model))
    headers = dict(kwargs.get("extra_headers") or {})
    body: dict[str, Any] = {"model": litellm_name(model).split("/", 1)[1], "max_tokens": 1,
                            "messages": [{"role": "user", "content": "Reply with OK."}]}
    if route == "gemini":  # the key in its header, never in the URL (which errors and logs quote)
        body = {"contents": [{"role": "user", "parts": [{"text": "Reply with OK."}]}],
                "generationConfig": {"maxOutputTokens": 1}}
        if key:
            headers["x-goog-api-key"] = key
    elif route == "anthropic":
        headers.setdefault("anthropic-version", "2023-06-01")
        if key:
            headers["x-api-key"] = key
    elif key:
        headers["authorization"] = f"Bearer {key}"
    try:
        with Waiting(f"{url} to answer a 1-token check of '{model.name}'"):
            reply = httpx.post(url, json=body, headers=headers,
                               timeout=httpx.Timeout(CHECK_REPLY_TIMEOUT_S, connect=model.connect_timeout_s))
    except httpx.TransportError as exc:
        failure = transport_failure(exc) or "connect"
        raise UserError(unreachable(model, where, failure, error_text(exc, kwargs) or type(exc).__name__, skip)) from None
    text = error_text(Exception(reply.text), kwargs)
    # The Gemini API refuses a wrong key with a 400 that says so (reason API_KEY_INVALID), not a 401.
    if reply.status_code in (401, 403) or (route == "gemini" and "API_KEY_INVALID" in reply.text):
        raise UserError(rejected(model, where, f"{reply.status_code}: {text}", skip))
    if reply.status_code == 404:
        raise UserError(unknown_model(model, where, f"404: {text}", skip))
    # Any other answer (200, 400, 429, 5xx): the endpoint is reachable and did not refuse the key.


def rejected(model: "ModelConfig", where: str, detail: str, skip: str) -> str:
    return f"the model endpoint{where} rejected the API key for '{model.name}' ({detail}): {key_hint(model)}{skip}"


def unknown_model(model: "ModelConfig", where: str, detail: str, skip: str) -> str:
    return (f"the model endpoint{where} does not know model '{model.name}' ({detail}); "
            f"check the model name and --model-base-url{skip}")


def unreachable(model: "ModelConfig", where: str, failure: str, detail: str, skip: str) -> str:
    if failure == "timeout":
        return (f"the model endpoint{where} did not answer a 1-token request for '{model.name}' within "
                f"{model.connect_timeout_s:g} s to connect and {CHECK_REPLY_TIMEOUT_S:g} s to reply "
                f"({detail}); check --model-base-url and the network{skip}")
    return (f"cannot reach the model endpoint{where} for '{model.name}' ({detail}); "
            f"check --model-base-url and the network{skip}")


def transport_failure(exc: BaseException) -> str | None:
    """"timeout" or "connect" when no answer came back (litellm may report it as an InternalServerError), else None."""
    import httpx

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, (httpx.TimeoutException, TimeoutError)) or type(seen).__name__ in ("Timeout", "APITimeoutError"):
            return "timeout"
        if isinstance(seen, (httpx.TransportError, ConnectionError)):
            return "connect"
        seen = seen.__cause__ or seen.__context__
    return None


def error_text(exc: BaseException, kwargs: dict[str, Any]) -> str:
    """One short line of a litellm error, the key scrubbed."""
    text = " ".join(str(getattr(exc, "message", None) or exc).split())
    key = kwargs.get("api_key")
    return (text.replace(key, "***") if key else text)[:300]


def token_counts(response: Any) -> tuple[int, int, int]:
    """(input, output, cached input) tokens of a litellm reply; cached ones are part of input."""
    usage = getattr(response, "usage", None)
    if usage is None:
        return 0, 0, 0
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) or getattr(usage, "cache_read_input_tokens", None) or 0
    return int(getattr(usage, "prompt_tokens", 0) or 0), int(getattr(usage, "completion_tokens", 0) or 0), int(cached)


def token_cost(pricing: Any, tokens_in: int, tokens_out: int, cached: int, cache_write: int = 0) -> float:
    """A preset's per-million-token prices over one call's tokens (reads and writes are part of tokens_in;
    each kind without a price of its own is priced as input)."""
    input_price = pricing.input_per_mtok or 0.0
    read_price = pricing.cached_per_mtok if pricing.cached_per_mtok is not None else input_price
    write_price = pricing.cache_write_per_mtok if pricing.cache_write_per_mtok is not None else input_price
    return ((tokens_in - cached - cache_write) * input_price + cached * read_price + cache_write * write_price
            + tokens_out * (pricing.output_per_mtok or 0.0)) / MTOK


def tokens_price(model: "ModelConfig", tokens_in: int, tokens_out: int, cached: int, cache_write: int = 0) -> tuple[float, bool]:
    """Tokens x the model's price: the preset's per-million prices, else litellm's bundled map (which prices
    cache reads and writes of its own); (0, False) for a model neither prices."""
    pricing = model.pricing
    if pricing is not None and (pricing.input_per_mtok is not None or pricing.output_per_mtok is not None):
        return token_cost(pricing, tokens_in, tokens_out, cached, cache_write), True
    try:
        return float(sum(import_litellm().cost_per_token(
            model=litellm_name(model), prompt_tokens=tokens_in, completion_tokens=tokens_out,
            cache_read_input_tokens=cached, cache_creation_input_tokens=cache_write))), True
    except Exception:  # an unpriced model: litellm raises several kinds; cost is unknown, not fatal
        return 0.0, False


class Meter:
    """One trial's model calls: tokens, time spent waiting on the endpoint, and cost."""

    def __init__(self, model: "ModelConfig", calls_path: Path | None = None) -> None:
        self.model = model
        self.calls = CallLog(calls_path) if calls_path else None  # model_calls.jsonl, for the cost report
        self.name = litellm_name(model)
        self.usage = Usage()
        self._unbilled_s = 0.0  # waiting time not yet charged at an hourly rate
        self._lock = threading.Lock()

    @property
    def hourly(self) -> bool:
        """Billed by the hour of the endpoint, not per token."""
        return self.model.pricing is not None and self.model.pricing.hourly_usd is not None

    def failed(self) -> None:
        """A request that got no usable reply (retried, or the trial's end): kept count of, never lost."""
        with self._lock:
            self.usage.model_errors += 1

    def waited(self, seconds: float, failed: bool | None = None) -> None:
        """Time spent in one request, successful or not (a self-hosted GPU is busy either way).
        Called from a `finally` without `failed`: an exception in flight means the request failed."""
        with self._lock:
            self.usage.generation_s += seconds
            self._unbilled_s += seconds
            if self.calls:
                self.calls.ended(seconds, failed=sys.exc_info()[0] is not None if failed is None else failed)

    def charge(self, response: Any) -> float:
        """Count one litellm reply; returns its cost in USD."""
        return self.count(*token_counts(response), response=response)

    def count(self, tokens_in: int, tokens_out: int, cached: int, response: Any = None, cache_write: int = 0) -> float:
        """Count one reply by its token counts (the gateway has the endpoint's usage, no litellm reply);
        `cache_write`: the part of tokens_in written to the prompt cache (Anthropic prices it above input)."""
        with self._lock:
            cost, known = self._price(response, tokens_in, tokens_out, cached, cache_write)
            self._unbilled_s = 0.0
            u = self.usage
            u.model_calls += 1
            u.tokens_in += tokens_in
            u.tokens_out += tokens_out
            u.tokens_cached += cached
            u.tokens_cache_write += cache_write
            u.cost_usd += cost
            u.cost_known = u.cost_known and known
            if self.calls:
                self.calls.priced(tokens_in, tokens_out, cached, cost if known else None, cache_write)
        return cost

    def _price(self, response: Any, tokens_in: int, tokens_out: int, cached: int, cache_write: int = 0) -> tuple[float, bool]:
        pricing = self.model.pricing
        if pricing is not None and pricing.hourly_usd is not None:
            return pricing.hourly_usd * self._unbilled_s / 3600, True
        if response is None:
            return tokens_price(self.model, tokens_in, tokens_out, cached, cache_write)
        if pricing is not None and (pricing.input_per_mtok is not None or pricing.output_per_mtok is not None):
            return token_cost(pricing, tokens_in, tokens_out, cached, cache_write), True
        try:
            return float(import_litellm().cost_calculator.completion_cost(response, model=self.name)), True
        except Exception:  # an unpriced model: litellm raises several kinds; cost is unknown, not fatal
            return 0.0, False
