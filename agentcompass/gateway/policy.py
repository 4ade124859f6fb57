"""What of an agent's request the gateway forwards: per API shape, an allowlist of body fields and headers.

The agent is untrusted, the key is ours: a field that multiplies the bill (`n`, a huge `max_tokens`,
`service_tier: priority`), keeps state on the provider's side (`background`, `previous_response_id`,
`conversation`, a stored `prompt`), or gives a task without internet the web through the provider (its
hosted tools: web search and fetch, code execution, computer use, file search, remote MCP) never reaches
the upstream as sent. Each field the API documents is either allowed, allowed with a bound, or refused;
a field no list names is refused, so a new API feature is off until someone decides on it
(tests/test_gateway_policy.py compares these lists with the official SDKs' request types).

A refusal is a 400 in the API's own error shape with a message that names the field and what is allowed:
the agent sees it as any API error, and the attempt goes on (every attempt counts). The one bound that
is lowered rather than refused is the output-token limit: the real APIs refuse a limit above the model's,
so lowering it to the model's own gives the agent what the API would at most have given.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

DEFAULT_MAX_OUTPUT_TOKENS = 131_072  # a model litellm does not know (self-hosted): its server bounds it too
PREFIX = "agentcompass gateway: "

# Top-level body fields forwarded as sent (bounded ones are checked below), per kind of call.
CHAT_FIELDS = frozenset({
    "messages", "model", "frequency_penalty", "function_call", "functions", "logit_bias", "logprobs",
    "max_completion_tokens", "max_tokens", "metadata", "modalities", "n", "parallel_tool_calls", "prediction",
    "presence_penalty", "prompt_cache_key", "prompt_cache_retention", "reasoning_effort", "response_format",
    "safety_identifier", "seed", "service_tier", "stop", "store", "stream", "stream_options", "temperature",
    "tool_choice", "tools", "top_logprobs", "top_p", "user", "verbosity", "web_search_options"})
RESPONSES_FIELDS = frozenset({
    "input", "model", "background", "include", "instructions", "max_output_tokens", "max_tool_calls", "metadata",
    "parallel_tool_calls", "prompt_cache_key", "prompt_cache_retention", "reasoning", "safety_identifier",
    "service_tier", "store", "stream", "stream_options", "temperature", "text", "tool_choice", "tools",
    "top_logprobs", "top_p", "truncation", "user",
    "client_metadata"})  # Codex's request ids (not in the SDK's types; OpenAI takes them)
MESSAGES_FIELDS = frozenset({
    "messages", "model", "max_tokens", "metadata", "stop_sequences", "stream", "system", "temperature", "thinking",
    "tool_choice", "tools", "top_k", "top_p", "context_management", "output_config", "output_format",
    "cache_control", "service_tier", "mcp_servers", "container"})
COUNT_TOKENS_FIELDS = MESSAGES_FIELDS - {"max_tokens", "stream", "stop_sequences", "temperature", "top_k", "top_p"}
FIELDS = {"chat": CHAT_FIELDS, "responses": RESPONSES_FIELDS, "messages": MESSAGES_FIELDS,
          "count_tokens": COUNT_TOKENS_FIELDS}
# Why the documented fields no list above names are refused (the test reads this too).
REFUSED_FIELDS = {
    "audio": "audio output is billed far above text and no coding agent needs it",
    "moderation": "not a model call's business",
    "prompt_cache_options": "an account-level cache setting",
    "conversation": "server-side state (a conversation object kept by the provider)",
    "previous_response_id": "server-side state (a response stored by the provider)",
    "prompt": "a prompt template stored in the provider account",
    "background_options": "background responses are fetched later by id, past the gateway's metering",
    "access_programs": "an account-level setting",
    "image": "not a text model call",
    "context_management": "server-side compaction (on /v1/responses; Anthropic's context edits pass)",
    "betas": "a body field the SDK turns into the anthropic-beta header; send the header",
    "billing_policy": "an account-level billing setting", "fallback_credit_token": "an account-level billing setting",
    "fallbacks": "another model than the run's", "inference_geo": "priced above the standard rate",
    "speed": "fast mode is priced above the standard rate", "workspace_id": "an account-level setting",
    "user_profile_id": "an account-level setting", "compaction": "server-side compaction",
    "diagnostics": "an account-level setting", "thread": "server-side state",
}
MAX_TOKEN_FIELDS = {"chat": ("max_tokens", "max_completion_tokens"), "responses": ("max_output_tokens",),
                    "messages": ("max_tokens",)}
STANDARD_TIERS = frozenset({"auto", "default", "standard_only"})  # service tiers billed at the standard rate
HOSTED_FIELDS = {"web_search_options", "mcp_servers", "container"}  # the provider reaches out (search, MCP, sandbox)
# Tools the client runs itself; any other type is a tool the provider runs (web_search*, web_fetch*, code_execution*,
# code_interpreter, file_search, computer*, image_generation, mcp, ...).
CLIENT_TOOLS = {"chat": frozenset({"function", "custom"}),
                "responses": frozenset({"function", "custom", "local_shell", "shell", "apply_patch", "tool_search"}),
                "messages": frozenset({"custom"})}
CLIENT_TOOL_PREFIXES = ("bash_", "text_editor_", "memory_", "tool_search_tool_")  # Anthropic's client-run versioned tools
# anthropic-beta values the shipped CLIs send (Claude Code 2.1.332, opencode 1.18.33), and harmless streaming ones.
ANTHROPIC_BETAS = frozenset({
    "claude-code-20250219", "interleaved-thinking-2025-05-14", "context-management-2025-06-27",
    "thinking-token-count-2026-05-13", "advanced-tool-use-2025-11-20", "thinking-display-updates-2026-08-18",
    "structured-outputs-2025-11-13", "fine-grained-tool-streaming-2025-05-14", "token-efficient-tools-2025-02-19",
    "prompt-caching-2024-07-31"})
HOSTED_BETA_PREFIXES = ("web-search-", "web-fetch-", "code-execution-", "mcp-client-", "computer-use-")  # with internet
OPENAI_BETAS = frozenset({"responses=experimental"})
ANTHROPIC_VERSIONS = frozenset({"2023-06-01"})
QUERIES = {"messages": {"", "beta=true"}, "count_tokens": {"", "beta=true"}}  # Claude Code calls ?beta=true


class Refused(Exception):
    """A request the gateway does not forward; the message says what was wrong and what is allowed."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(PREFIX + message)
        self.status = status


@dataclass(frozen=True)
class RequestPolicy:
    """What one trial's requests may carry."""

    max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS
    hosted_tools: bool = False  # the trial's task allows internet: the provider's own tools may reach the web
    extensions: frozenset[str] = field(default_factory=frozenset)  # fields the preset's tiers set (vLLM's)


def admit(kind: str, query: str, headers: Mapping[str, str], body: dict[str, Any],
          policy: RequestPolicy) -> dict[str, Any]:
    """The body to forward (the client's, with a too-large output limit lowered), or Refused.
    kind: chat | responses | messages | count_tokens."""
    if query not in QUERIES.get(kind, {""}):
        raise Refused(f"the query string {query!r} is not forwarded; send the request without one"
                      + (" (or ?beta=true)" if kind in QUERIES else ""))
    check_headers(headers, policy)
    allowed = FIELDS[kind] | policy.extensions
    for name in body:
        if name not in allowed:
            why = REFUSED_FIELDS.get(name, "not a field the gateway forwards for this API")
            raise Refused(f"field {name!r} is not forwarded ({why}); remove it")
    if kind == "chat" and body.get("n") not in (None, 1):
        raise Refused(f"n={body.get('n')!r}: one completion per call (n at most 1); make several calls instead")
    tier = body.get("service_tier")
    if tier is not None and tier not in STANDARD_TIERS:
        raise Refused(f"service_tier {tier!r} is not forwarded (billed apart from the standard rate); "
                      f"send none or one of {', '.join(sorted(STANDARD_TIERS))}")
    if kind == "responses" and body.get("background") not in (None, False):
        raise Refused("background responses are not forwarded (fetched later by id, past the gateway); "
                      "send background false or leave it out")
    if body.get("store") not in (None, False) and kind == "chat":
        raise Refused("store true is not forwarded (keeps the completion in the provider account); leave it out")
    if body.get("store") not in (None, False) and kind == "responses":
        raise Refused("store true is not forwarded (keeps the response in the provider account); send store false")
    if not policy.hosted_tools:
        check_hosted_tools(kind, body)
    return bounded_output(kind, body, policy.max_output_tokens)


def check_headers(headers: Mapping[str, str], policy: RequestPolicy) -> None:
    version = headers.get("anthropic-version")
    if version is not None and version not in ANTHROPIC_VERSIONS:
        raise Refused(f"anthropic-version {version!r} is not forwarded; send {', '.join(sorted(ANTHROPIC_VERSIONS))}")
    for beta in split_list(headers.get("anthropic-beta")):
        hosted = policy.hosted_tools and beta.startswith(HOSTED_BETA_PREFIXES)
        if beta not in ANTHROPIC_BETAS and not hosted:
            why = "a provider-hosted tool's, and this task has no internet" if beta.startswith(HOSTED_BETA_PREFIXES) \
                else "not one the gateway forwards"
            raise Refused(f"anthropic-beta {beta!r} is {why}; the forwarded ones are {', '.join(sorted(ANTHROPIC_BETAS))}")
    for beta in split_list(headers.get("openai-beta")):
        if beta not in OPENAI_BETAS:
            raise Refused(f"openai-beta {beta!r} is not forwarded; the forwarded ones are {', '.join(sorted(OPENAI_BETAS))}")


def split_list(value: str | None) -> list[str]:
    return [part.strip() for part in (value or "").split(",") if part.strip()]


def check_hosted_tools(kind: str, body: dict[str, Any]) -> None:
    """A task without internet gets no tool the provider runs: a web search there is the web."""
    no_internet = "this task has no internet, and a tool the provider runs would give it the web"
    for name in HOSTED_FIELDS & body.keys():
        raise Refused(f"field {name!r} is a provider-hosted tool and {no_internet}; remove it")
    tools = body.get("tools")
    if tools is None:
        return
    if not isinstance(tools, list):
        raise Refused("tools must be a list")
    api = "messages" if kind == "count_tokens" else kind
    for tool in tools:
        kind_of_tool = tool.get("type") if isinstance(tool, dict) else None
        if api == "messages" and (kind_of_tool is None or str(kind_of_tool).startswith(CLIENT_TOOL_PREFIXES)):
            continue  # Anthropic's client tools carry no type
        if kind_of_tool in CLIENT_TOOLS[api]:
            continue
        raise Refused(f"tool type {kind_of_tool!r} is run by the provider and {no_internet}; offer only tools the "
                      f"agent runs itself ({', '.join(sorted(CLIENT_TOOLS[api]))})")


def bounded_output(kind: str, body: dict[str, Any], limit: int) -> dict[str, Any]:
    """The body with each output-token limit at most the model's (a copy only when one is lowered)."""
    lowered = {name: limit for name in MAX_TOKEN_FIELDS.get(kind, ())
               if isinstance(body.get(name), int) and not isinstance(body.get(name), bool) and body[name] > limit}
    for name in MAX_TOKEN_FIELDS.get(kind, ()):
        value = body.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise Refused(f"{name} {value!r} is not a positive integer")
    return {**body, **lowered} if lowered else body


def output_limit(model: Any) -> int:
    """The preset's bound on one call's output tokens: model.max_output_tokens, else litellm's figure for the
    model, else DEFAULT_MAX_OUTPUT_TOKENS."""
    if getattr(model, "max_output_tokens", None):
        return int(model.max_output_tokens)
    from agentcompass.core.models import import_litellm, litellm_name

    try:
        known = import_litellm().get_model_info(litellm_name(model)).get("max_output_tokens")
    except Exception:  # a model litellm does not know: several exception kinds
        known = None
    return int(known) if isinstance(known, int) and known > 0 else DEFAULT_MAX_OUTPUT_TOKENS


def tier_extensions(reasoning_map: dict[str, dict[str, Any]], tier: dict[str, Any]) -> frozenset[str]:
    """Top-level fields the preset's tiers set: an extension its server takes (vLLM's chat_template_kwargs) is then
    the run's own choice, and the client may send it (the tier's value replaces the client's anyway)."""
    names = set(tier)
    for fields in reasoning_map.values():
        names |= set(fields)
    return frozenset(names)
