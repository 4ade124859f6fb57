"""The Gemini API at the model gateway: `POST /v1beta/models/{model}:generateContent`, `:streamGenerateContent?alt=sse`
and `:countTokens`, as Google's SDKs (google-genai, @google/genai, and so gemini-cli) send them.

What differs from the OpenAI and Anthropic APIs, and why each choice:
- the key comes in `x-goog-api-key` (or `?key=`, which some clients put in the URL); it is the trial's token,
  checked like the others', and never goes upstream: the real key does, in the header only;
- the model is in the path: the upstream's replaces it, whatever the client named;
- the query string carries only `alt=sse` (a stream) and `key`: a stream without `alt=sse` comes back as one JSON
  array the gateway could not meter event by event, so it is refused rather than forwarded unmetered;
- the API parses each field name in camelCase and in snake_case alike (google-genai sends the objects it nests in
  snake_case, litellm sends `system_instruction`, `function_declarations`, `max_output_tokens`): the names the policy
  reads (the request's, generationConfig's, thinkingConfig's, a tool's) are put in camelCase before any check, and
  a name sent in both spellings is refused, so no spelling carries what the other may not;
- usage is `usageMetadata`: thoughts are billed as output, the cached part of the prompt is input read from cache.
"""

from __future__ import annotations

import copy
import re
from typing import Any, Mapping
from urllib.parse import parse_qsl

from agentcompass.core.merge import deep_merge
from agentcompass.gateway.policy import REFUSED_FIELDS, Refused, RequestPolicy
from agentcompass.gateway.tiers import leaf_paths, remove_path

API_VERSION = "v1beta"  # gemini-cli's (@google/genai); google-genai 2+ calls /v1, which is served too
DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com"
CALL = re.compile(r"^models/(?P<model>[^/:]+):(?P<method>generateContent|streamGenerateContent|countTokens)$")
GENERATE_FIELDS = frozenset({"contents", "tools", "toolConfig", "safetySettings", "systemInstruction",
                             "generationConfig", "serviceTier", "store"})
COUNT_FIELDS = frozenset({"contents", "generateContentRequest"})
CONFIG_FIELDS = frozenset({
    "temperature", "topP", "topK", "candidateCount", "maxOutputTokens", "stopSequences", "responseLogprobs",
    "logprobs", "presencePenalty", "frequencyPenalty", "seed", "responseMimeType", "responseSchema",
    "responseJsonSchema", "thinkingConfig", "mediaResolution", "responseModalities", "enableEnhancedCivicAnswers"})
REFUSED = {  # documented fields no list above names, and why
    "cachedContent": "server-side state (a cache kept in the provider account)",
    "labels": "an account-level billing setting",
    "speechConfig": "audio output is billed far above text and no coding agent needs it",
    "audioTranscriptionConfig": "audio is billed far above text and no coding agent needs it",
    "imageConfig": "not a text model call",
    "continuationToken": "server-side state (a reply continued by the provider)",
    "audioTimestamp": "audio is billed far above text and no coding agent needs it",
    "enableAffectiveDialog": "a live audio dialog setting, not a text model call's",
    "translationConfig": "not a text model call",
    "routingConfig": "another model than the run's", "modelSelectionConfig": "another model than the run's",
    "responseFormat": "not decided for the gateway yet (the Gemini API documents responseMimeType and responseJsonSchema)",
}
THINKING_CHOICES = ("thinkingBudget", "thinkingLevel")  # the API takes one or the other, never both
STANDARD_TIERS = frozenset({"standard", "unspecified", "service_tier_unspecified"})  # lower-cased
CLIENT_TOOLS = frozenset({"functionDeclarations"})  # every other tool (googleSearch, codeExecution, urlContext, ...)
# is run by the provider, with the web


def call_of(method: str, path: str) -> tuple[str, bool] | None:
    """(the Gemini method, whether it is a metered model call) of a path after /v1beta/, or None."""
    match = CALL.match(path) if method == "POST" else None
    if match is None:
        return None
    return match["method"], match["method"] != "countTokens"


def own_reply(method: str, version: str, path: str, upstream: Any) -> tuple[int, dict[str, Any]] | None:
    """What the gateway answers itself (status, JSON): its model list, or why a request is not one it forwards;
    None for a call to forward. `upstream`: agentcompass.gateway.app.Upstream."""
    if method == "GET" and path in ("models", f"models/{upstream.model}"):
        listed = model_list(upstream.model)
        return 200, listed if path == "models" else listed["models"][0]
    if call_of(method, path) is None:
        return 404, error_body(404, f"agentcompass gateway: no {method} /{version}/{path} here; it serves "
                                    "models/MODEL:generateContent, :streamGenerateContent and :countTokens")
    if upstream.shape != "gemini":
        return 400, error_body(400, f"agentcompass gateway: model '{upstream.model}' is served by an {upstream.shape}-"
                                    "compatible endpoint and this gateway does not translate Gemini requests to it; use "
                                    f"a client that speaks the {upstream.shape} API")
    return None


def forwarded(version: str, path: str, query: str, sent: dict[str, Any], upstream: Any,
              policy: RequestPolicy) -> tuple[str, dict[str, Any], bool]:
    """The upstream URL (its model, the admitted query), the body as the upstream gets it (admitted, with the tier)
    and whether it is a metered model call; Refused by the policy."""
    call = call_of("POST", path)
    assert call is not None  # own_reply answered every other path
    method, metered = call
    body, query = admit(method, query, sent, policy)
    body = copy.deepcopy(body)
    if metered:
        for cleared in upstream.cleared:
            remove_path(body, cleared)
        body = with_tier(body, upstream.tier, sets_thinking(upstream.cleared | leaf_paths(upstream.tier)))
    elif isinstance(body.get("generateContentRequest"), dict):  # counting a whole request, which names the model
        body["generateContentRequest"]["model"] = f"models/{upstream.model}"
    url = upstream.url(f"{version}/models/{upstream.model}:{method}")
    return (f"{url}?{query}" if query else url), body, metered


def token_of(headers: Mapping[str, str], query: str) -> str:
    """The trial's token as a Gemini client sends its key: `x-goog-api-key`, else `?key=`, else a bearer token."""
    if headers.get("x-goog-api-key"):
        return headers["x-goog-api-key"]
    for name, value in parse_qsl(query, keep_blank_values=True):
        if name == "key":
            return value
    auth = headers.get("authorization", "")
    return auth[7:].strip() if auth.lower().startswith("bearer ") else ""


def upstream_query(method: str, query: str) -> str:
    """The query string forwarded: `alt=sse` for a stream, nothing else (the key never); Refused otherwise."""
    seen = parse_qsl(query, keep_blank_values=True)
    names = [name for name, _ in seen]
    if any(name not in ("alt", "key") for name in names) or len(names) != len(set(names)):
        raise Refused("only ?alt=sse (streamGenerateContent) and ?key= are forwarded in the query string; "
                      "send the request without the others")
    alt = dict(seen).get("alt")
    if method == "streamGenerateContent":
        if alt != "sse":
            raise Refused("streamGenerateContent is forwarded with ?alt=sse only (server-sent events, each metered); "
                          "add alt=sse to the query string")
        return "alt=sse"
    if alt not in (None, "json"):
        raise Refused(f"alt={alt!r} is not forwarded for {method}; send alt=json or none")
    return ""


def camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(part[:1].upper() + part[1:] for part in rest)


def camel_keys(fields: Mapping[str, Any], where: str) -> dict[str, Any]:
    """`fields` with each name in camelCase (values as sent); Refused when two spellings name one field."""
    renamed: dict[str, Any] = {}
    for name, value in fields.items():
        if camel(name) in renamed:
            raise Refused(f"{where} names {camel(name)!r} twice (in camelCase and in snake_case); send it once")
        renamed[camel(name)] = value
    return renamed


def admit(method: str, query: str, body: dict[str, Any], policy: RequestPolicy) -> tuple[dict[str, Any], str]:
    """The body to forward (the names the policy reads in camelCase, an output limit above the model's lowered to
    it) and the upstream query; or Refused."""
    forwarded_query = upstream_query(method, query)
    if method == "countTokens":
        body = camel_keys(body, "the request")
        check_fields(body, COUNT_FIELDS, "countTokens")
        inner = body.get("generateContentRequest")
        if inner is not None:
            if not isinstance(inner, dict):
                raise Refused("generateContentRequest must be an object")
            body = {**body, "generateContentRequest": admit_generate(
                {k: v for k, v in inner.items() if k != "model"}, policy)}
        return body, forwarded_query
    return admit_generate(body, policy), forwarded_query


def check_fields(body: Mapping[str, Any], allowed: frozenset[str], where: str) -> None:
    for name in body:
        if name not in allowed:
            why = REFUSED.get(name) or REFUSED_FIELDS.get(name) or f"not a field the gateway forwards in {where}"
            raise Refused(f"field {name!r} is not forwarded ({why}); remove it")


def admit_generate(body: dict[str, Any], policy: RequestPolicy) -> dict[str, Any]:
    body = camel_keys(body, "the request")
    check_fields(body, GENERATE_FIELDS, "a Gemini request")
    tier = body.get("serviceTier")
    if tier is not None and str(tier).lower() not in STANDARD_TIERS:
        raise Refused(f"serviceTier {tier!r} is not forwarded (billed apart from the standard rate); send none or 'standard'")
    if body.get("store") not in (None, False):
        raise Refused("store true is not forwarded (keeps the interaction in the provider account); leave it out")
    config = body.get("generationConfig")
    if config is not None:
        if not isinstance(config, dict):
            raise Refused("generationConfig must be an object")
        config = camel_keys(config, "generationConfig")
        if isinstance(config.get("thinkingConfig"), dict):
            config["thinkingConfig"] = camel_keys(config["thinkingConfig"], "thinkingConfig")
        check_fields(config, CONFIG_FIELDS, "generationConfig")
        if config.get("candidateCount") not in (None, 1):
            raise Refused(f"candidateCount={config.get('candidateCount')!r}: one candidate per call (at most 1); "
                          "make several calls instead")
        modalities = config.get("responseModalities")
        if modalities is not None and (not isinstance(modalities, list) or any(str(m).upper() != "TEXT" for m in modalities)):
            raise Refused(f"responseModalities {modalities!r} is not forwarded (only text; audio and images are "
                          "billed far above it); send ['TEXT'] or none")
        body = {**body, "generationConfig": bounded_config(config, policy.max_output_tokens)}
    if body.get("tools") is not None:
        body = {**body, "tools": checked_tools(body["tools"], policy)}
    return body


def bounded_config(config: dict[str, Any], limit: int) -> dict[str, Any]:
    value = config.get("maxOutputTokens")
    if value is None:
        return config
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise Refused(f"maxOutputTokens {value!r} is not a positive integer")
    return {**config, "maxOutputTokens": limit} if value > limit else config


def checked_tools(tools: Any, policy: RequestPolicy) -> list[dict[str, Any]]:
    """The tools, each one's kind in camelCase: function declarations (the agent runs them) pass; a tool the provider
    runs passes only when the task has internet, and a kind the API does not document never."""
    if not isinstance(tools, list) or not all(isinstance(tool, dict) for tool in tools):
        raise Refused("tools must be a list of objects")
    tools = [camel_keys(tool, "a tool") for tool in tools]
    for tool in tools:
        for name in tool:
            if name in CLIENT_TOOLS:
                continue
            if name not in HOSTED_TOOLS:
                raise Refused(f"tool {name!r} is not forwarded (not a tool the Gemini API documents); "
                              "offer functionDeclarations")
            if not policy.hosted_tools:
                raise Refused(f"tool {name!r} is run by the provider and this task has no internet, and a tool the "
                              "provider runs would give it the web; offer only functionDeclarations (the agent runs them)")
    return tools


HOSTED_TOOLS = frozenset({"googleSearch", "googleSearchRetrieval", "codeExecution", "urlContext", "retrieval",
                          "fileSearch", "googleMaps", "computerUse", "enterpriseWebSearch", "mcpServers",
                          "parallelAiSearch", "exaAiSearch"})


def with_tier(body: dict[str, Any], tier: dict[str, Any], tiers_set_thinking: bool) -> dict[str, Any]:
    """The tier's fields set over the client's (a copy). Where the preset's tiers choose the thinking, the client's
    budget and level both go first: the API refuses both at once, and a client's budget beside a tier's level would
    be that refusal. The client's includeThoughts stays (whether thoughts are shown, not how much is thought)."""
    config = body.get("generationConfig")
    thinking = config.get("thinkingConfig") if isinstance(config, dict) else None
    if tiers_set_thinking and isinstance(thinking, dict):
        kept = {k: v for k, v in thinking.items() if k not in THINKING_CHOICES}
        config = {**config, "thinkingConfig": kept} if kept else {k: v for k, v in config.items() if k != "thinkingConfig"}
        body = {**body, "generationConfig": config} if config else {k: v for k, v in body.items() if k != "generationConfig"}
    return deep_merge(body, tier)


def sets_thinking(paths: set[tuple[str, ...]] | frozenset[tuple[str, ...]]) -> bool:
    return any(path[:2] == ("generationConfig", "thinkingConfig") and path[-1] in THINKING_CHOICES for path in paths)


def token_counts(usage: Any) -> tuple[int, int, int, int] | None:
    """(input, output, cache reads, cache writes) of a usageMetadata: the prompt (its cached part included, and the
    prompt of a hosted tool's result), the candidates and the thoughts (billed as output); Gemini writes no cache
    at a price of its own."""
    if not isinstance(usage, dict):
        return None

    def number(key: str) -> int:
        value = usage.get(key)
        return int(value) if isinstance(value, (int, float)) else 0

    return (number("promptTokenCount") + number("toolUsePromptTokenCount"),
            number("candidatesTokenCount") + number("thoughtsTokenCount"), number("cachedContentTokenCount"), 0)


def finished(data: dict[str, Any]) -> bool:
    """A streamed chunk that ends the reply: a candidate with its finishReason, or a prompt blocked outright."""
    candidates = data.get("candidates")
    if isinstance(candidates, list) and any(isinstance(c, dict) and c.get("finishReason") for c in candidates):
        return True
    feedback = data.get("promptFeedback")
    return isinstance(feedback, dict) and bool(feedback.get("blockReason"))


STATUS_NAMES = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
                429: "RESOURCE_EXHAUSTED", 502: "UNAVAILABLE", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}


def error_body(status: int, message: str) -> dict[str, Any]:
    """An error as the Gemini API shapes it (google.rpc.Status), so its clients report the message."""
    return {"error": {"code": status, "message": message, "status": STATUS_NAMES.get(status, "INTERNAL")}}


def model_list(model: str) -> dict[str, Any]:
    """GET /v1beta/models: the one model this gateway serves."""
    return {"models": [{"name": f"models/{model}", "displayName": model,
                        "supportedGenerationMethods": ["generateContent", "streamGenerateContent", "countTokens"]}]}


__all__ = ["API_VERSION", "DEFAULT_BASE_URL", "admit", "call_of", "error_body", "finished", "forwarded",
           "model_list", "own_reply", "sets_thinking", "token_counts", "token_of", "with_tier"]
