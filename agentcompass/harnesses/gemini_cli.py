"""gemini_cli: Google's `@google/gemini-cli` (Node, brought in its bundle), `gemini -p --output-format stream-json`, on
an endpoint that serves the Gemini API (`generateContent` / `streamGenerateContent`).

The endpoint is the Gemini API key auth: GEMINI_API_KEY and GOOGLE_GEMINI_BASE_URL (which the CLI's google-genai
client honours) from the env file, so the key is in no file and on no command line. Through the gateway that is its
Gemini route (`endpoint.gemini_base_url`); without one, the preset's own base_url. Every tool is allowed (`--yolo`,
and the task's workdir is trusted, GEMINI_CLI_TRUST_WORKSPACE, else headless runs refuse to start);
telemetry, usage statistics and update checks are off in its settings.json, and it does not relaunch itself in a
second Node for a bigger heap (GEMINI_CLI_NO_RELAUNCH: two Nodes outgrow a small task's memory limit).
Usage without the gateway: the final `result` event's `stats` (input includes cached tokens; output is total - input,
thoughts included, as they are billed), priced by the model's prices. Errors: the endpoint's HTTP status in the error it prints (`got status: 429`, `"code": 401`).
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from agentcompass.core.models import cli_model_name
from agentcompass.core.task import Usage
from agentcompass.harnesses.installed import json_events, status_verdict
from agentcompass.harnesses.node_agent import NodeInstalledAgent

if TYPE_CHECKING:
    from agentcompass.core.schema import ModelConfig

GEMINI_DEFAULT_URL = "https://generativelanguage.googleapis.com"
STATUS = re.compile(r'(?:got status:?\s*|"code":\s*|\[API Error: [^\]]*?\b)(\d{3})\b')
SETTINGS = {"general": {"disableAutoUpdate": True, "disableUpdateNag": True},
            "privacy": {"usageStatisticsEnabled": False}, "telemetry": {"enabled": False},
            "security": {"auth": {"selectedType": "gemini-api-key"}}}


def gemini_base_url(model: "ModelConfig", endpoint: Any) -> str:
    """The gateway's Gemini route when it has one, else the preset's base_url (without an OpenAI-style /v1)."""
    routed = getattr(endpoint, "gemini_base_url", None)
    if routed:
        return str(routed)
    base = (model.base_url or GEMINI_DEFAULT_URL).rstrip("/")
    return base.removesuffix("/v1beta").removesuffix("/v1")


class GeminiCliHarness(NodeInstalledAgent):
    name, package, command_name = "gemini_cli", "@google/gemini-cli", "gemini"
    model_apis = ("gemini",)

    def api_kind(self, model: "ModelConfig") -> str:
        return "gemini"

    def config_files(self, model: "ModelConfig", endpoint: Any) -> dict[str, str]:
        return {".gemini/settings.json": json.dumps(SETTINGS, indent=2)}

    def cli_env(self, model: "ModelConfig", endpoint: Any) -> dict[str, str]:
        return {"GEMINI_API_KEY": endpoint.api_key, "GOOGLE_GEMINI_BASE_URL": gemini_base_url(model, endpoint),
                "GEMINI_CLI_NO_RELAUNCH": "true", "GEMINI_CLI_TRUST_WORKSPACE": "true", "NO_UPDATE_NOTIFIER": "1"}

    def command(self, model: "ModelConfig", workdir: str) -> str:
        return (f"gemini --yolo --output-format stream-json --model {cli_model_name(model)} {self.extra_args} "
                f'-p "$(cat "$PROMPT_FILE")"')

    def read_usage(self, stdout: str) -> Usage:
        results = [e for e in json_events(stdout) if e.get("type") == "result"]
        if not results:
            return Usage(cost_known=False)
        stats = results[-1].get("stats") or {}
        tokens_in = int(stats.get("input_tokens", 0))
        # its output_tokens leave out the thoughts, which are billed as output: total - input holds them
        tokens_out = max(int(stats.get("output_tokens", 0)), int(stats.get("total_tokens", 0)) - tokens_in)
        return Usage(tokens_in=tokens_in, tokens_out=tokens_out,
                     tokens_cached=int(stats.get("cached", 0)), cost_known=False)

    def endpoint_error(self, output: str) -> str | None:
        return status_verdict(STATUS, output)
