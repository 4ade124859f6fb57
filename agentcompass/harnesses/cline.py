"""cline: the `cline` npm CLI (3.x: a native binary with its runtime built in, shipped as `@cline/cli-linux-x64`),
`cline --json`, on an OpenAI-compatible chat-completions endpoint.

Headless is `cline --json PROMPT` (act mode, every tool auto-approved by default). The endpoint is Cline's
`openai-compatible` provider in its settings store (HOME/.cline/data/settings/providers.json: base URL and model; the
file must carry `updatedAt` or Cline replaces it with its own default provider); the key is OPENAI_API_KEY from the
env file, which that provider reads, so the key is in no file and on no command line. A tier's reasoning effort goes
to `--thinking` (none..xhigh); through the gateway the tier's fields are set on each call as well.
Usage without the gateway: the `run_result` event's aggregate tokens (input includes cache reads), priced by the
model's prices; its own `totalCost` (0 for a provider it has no prices for) is kept beside as cli_cost_usd.
Errors: Cline classes each failure itself (`errorClass`: auth, context_window_exceeded, unknown) and prints the
endpoint's message, not its status; a rate limit is read from that message.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from agentcompass.core.errors import TrialError
from agentcompass.core.models import cli_model_name, request_fields
from agentcompass.core.task import Usage
from agentcompass.harnesses.installed import InstalledAgent, json_events
from agentcompass.harnesses.node_agent import context_window_error

if TYPE_CHECKING:
    from agentcompass.core.schema import ModelConfig

PROVIDER = "openai-compatible"
THINKING = ("none", "low", "medium", "high", "xhigh")
RATE_LIMIT = re.compile(r"rate[\s_-]?limit|too many requests", re.IGNORECASE)
OUTAGE = re.compile(r"\b5\d\d\b|service unavailable|internal server error|overloaded|cannot connect to api", re.IGNORECASE)


def error_events(stdout: str) -> list[dict[str, Any]]:
    """The `error` agent events: what failed, as Cline classed it."""
    return [(e.get("event") or {}).get("error") | {"class": (e.get("event") or {}).get("errorClass")}
            for e in json_events(stdout)
            if e.get("type") == "agent_event" and (e.get("event") or {}).get("type") == "error"
            and isinstance((e.get("event") or {}).get("error"), dict)]


class ClineHarness(InstalledAgent):
    name, package, command_name = "cline", "cline", "cline"
    binary = "@cline/cli-linux-x64/bin/cline"
    model_apis = ("openai",)

    def api_kind(self, model: "ModelConfig") -> str:
        return "chat"

    def config_files(self, model: "ModelConfig", endpoint: Any) -> dict[str, str]:
        providers = {"version": 1, "lastUsedProvider": PROVIDER, "modes": {},
                     "providers": {PROVIDER: {"settings": {"provider": PROVIDER, "model": cli_model_name(model),
                                                           "baseUrl": endpoint.openai_base_url},
                                              "updatedAt": "2026-01-01T00:00:00.000Z", "tokenSource": "manual"}}}
        return {".cline/data/settings/providers.json": json.dumps(providers, indent=2)}

    def cli_env(self, model: "ModelConfig", endpoint: Any) -> dict[str, str]:
        return {"OPENAI_API_KEY": endpoint.api_key, "CLINE_TELEMETRY_DISABLED": "1", "NO_UPDATE_NOTIFIER": "1"}

    def command(self, model: "ModelConfig", workdir: str) -> str:
        effort = request_fields(model).get("reasoning_effort")
        thinking = f"--thinking {effort} " if effort in THINKING else ""
        return (f"cline --json -P {PROVIDER} -m {cli_model_name(model)} {thinking}{self.extra_args} "
                f'"$(cat "$PROMPT_FILE")"')

    def read_usage(self, stdout: str) -> Usage:
        results = [e for e in json_events(stdout) if e.get("type") == "run_result"]
        if not results:
            return Usage(cost_known=False)
        result = results[-1]
        tokens = result.get("aggregateUsage") or result.get("usage") or {}
        written = int(tokens.get("cacheWriteTokens", 0))
        own = tokens.get("totalCost")
        return Usage(model_calls=int(result.get("iterations", 0)), tokens_in=int(tokens.get("inputTokens", 0)) + written,
                     tokens_out=int(tokens.get("outputTokens", 0)), tokens_cached=int(tokens.get("cacheReadTokens", 0)),
                     tokens_cache_write=written, cli_cost_usd=float(own) if isinstance(own, (int, float)) and own else None,
                     cost_known=False)

    def endpoint_error(self, output: str) -> str | None:
        errors = error_events(output)
        if not errors:
            return None
        last = errors[-1]
        if last.get("class") == "auth":
            return "auth"
        message = str(last.get("message", ""))
        if RATE_LIMIT.search(message):
            return "rate_limit"
        if re.search(r"model\b.*\b(does not exist|not found)", message, re.IGNORECASE):
            return "not_found"
        return "outage" if OUTAGE.search(message) else None

    def classify(self, code: int, timed_out: bool, stdout: str, stderr: str, limit: float | None,
                 metered: dict[str, Any] | None) -> TrialError | None:
        error = super().classify(code, timed_out, stdout, stderr, limit, metered)
        return context_window_error(self.name, error, f"{stdout}\n{stderr}")
