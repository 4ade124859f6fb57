"""copilot_cli: GitHub's `@github/copilot` CLI (its native linux-x64 binary, `@github/copilot-linux-x64`),
`copilot -p --output-format json`, on an OpenAI-compatible chat-completions or an Anthropic endpoint, offline.

Copilot CLI runs without GitHub when given a model provider of its own ("BYOK": COPILOT_PROVIDER_BASE_URL,
COPILOT_PROVIDER_TYPE openai|anthropic, COPILOT_PROVIDER_API_KEY, COPILOT_MODEL) and COPILOT_OFFLINE=true, which turns
off GitHub authentication, telemetry, web tools, the GitHub MCP server and auto-update: nothing of it needs the
internet. All from the env file (the key in no file, on no command line); every tool and path is allowed
(`--allow-all-tools --allow-all-paths`: the trial's sandbox is the isolation).
Usage: its JSON events carry no token counts (its `result` counts GitHub premium requests, 0 with BYOK), so tokens
and cost come from the gateway only; without one, model calls are counted and the cost is unknown.
Errors: a failed call is a `model.call_failure` event, the run's end a `session.error` event, both with the HTTP
`statusCode`; the session's error decides (a 401 it retried past is no failure).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from agentcompass.core.errors import TrialError
from agentcompass.core.models import cli_model_name
from agentcompass.core.task import Usage
from agentcompass.harnesses.installed import InstalledAgent, json_events, status_verdict
from agentcompass.harnesses.node_agent import context_window_error

if TYPE_CHECKING:
    from agentcompass.core.schema import ModelConfig

SESSION_STATUS = re.compile(r'"type":"session\.error","data":\{"errorType":"\w+","message":"(?:[^"\\]|\\.)*",'
                            r'"statusCode":(\d{3})')


class CopilotCliHarness(InstalledAgent):
    name, package, command_name = "copilot_cli", "@github/copilot", "copilot"
    binary = "@github/copilot-linux-x64/copilot"
    model_apis = ("openai", "anthropic")
    reports_tokens = False

    def api_kind(self, model: "ModelConfig") -> str:
        return "messages" if model.api == "anthropic" else "chat"

    def cli_env(self, model: "ModelConfig", endpoint: Any) -> dict[str, str]:
        anthropic = model.api == "anthropic"
        return {"COPILOT_OFFLINE": "true", "COPILOT_AUTO_UPDATE": "false", "COPILOT_MODEL": cli_model_name(model),
                "COPILOT_PROVIDER_TYPE": "anthropic" if anthropic else "openai",
                "COPILOT_PROVIDER_BASE_URL": endpoint.anthropic_base_url if anthropic else endpoint.openai_base_url,
                "COPILOT_PROVIDER_API_KEY": endpoint.api_key, "NO_COLOR": "1"}

    def command(self, model: "ModelConfig", workdir: str) -> str:
        return (f"copilot --output-format json --allow-all-tools --allow-all-paths --no-auto-update "
                f'{self.extra_args} -p "$(cat "$PROMPT_FILE")"')

    def read_usage(self, stdout: str) -> Usage:
        calls = sum(1 for e in json_events(stdout) if e.get("type") == "model.call_finished"
                    and (e.get("data") or {}).get("outcome") == "success")
        return Usage(model_calls=calls, cost_known=False)

    def endpoint_error(self, output: str) -> str | None:
        return status_verdict(SESSION_STATUS, output)

    def classify(self, code: int, timed_out: bool, stdout: str, stderr: str, limit: float | None,
                 metered: dict[str, Any] | None) -> TrialError | None:
        error = super().classify(code, timed_out, stdout, stderr, limit, metered)
        return context_window_error(self.name, error, f"{stdout}\n{stderr}")
