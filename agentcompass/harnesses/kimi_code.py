"""kimi_code: Moonshot's `@moonshot-ai/kimi-code` CLI (Node, brought in its bundle), `kimi -p --output-format
stream-json`, on an OpenAI-compatible chat-completions or an Anthropic endpoint.

Kimi Code takes a whole model from its environment (KIMI_MODEL_NAME, KIMI_MODEL_API_KEY, KIMI_MODEL_PROVIDER_TYPE
openai|anthropic, KIMI_MODEL_BASE_URL), all from the env file, so the key is in no file and on no command line;
a tier's reasoning effort goes to KIMI_MODEL_THINKING_EFFORT (the gateway sets the tier's fields on each call too).
Prompt mode runs every tool without asking. Auto-update is off (KIMI_CODE_NO_AUTO_UPDATE).
Usage: its stream-json prints messages without token counts, so tokens and cost come from the gateway only (without
one, model calls are counted and the cost is unknown). An endpoint error ends the run with
`error: failed to run prompt: provider.KIND: STATUS message` on stderr.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from agentcompass.core.models import cli_model_name, request_fields
from agentcompass.core.task import Usage
from agentcompass.harnesses.installed import HOME_DIR, json_events, status_verdict
from agentcompass.harnesses.node_agent import NodeInstalledAgent

if TYPE_CHECKING:
    from agentcompass.core.schema import ModelConfig

STATUS = re.compile(r"provider\.\w+: (\d{3})\b")


class KimiCodeHarness(NodeInstalledAgent):
    name, package, command_name = "kimi_code", "@moonshot-ai/kimi-code", "kimi"
    model_apis = ("openai", "anthropic")
    log_files = f"{HOME_DIR}/.kimi-code/logs/*.log"
    reports_tokens = False

    def api_kind(self, model: "ModelConfig") -> str:
        return "messages" if model.api == "anthropic" else "chat"

    def cli_env(self, model: "ModelConfig", endpoint: Any) -> dict[str, str]:
        anthropic = model.api == "anthropic"
        env = {"KIMI_MODEL_NAME": cli_model_name(model), "KIMI_MODEL_API_KEY": endpoint.api_key,
               "KIMI_MODEL_PROVIDER_TYPE": "anthropic" if anthropic else "openai",
               "KIMI_MODEL_BASE_URL": endpoint.anthropic_base_url if anthropic else endpoint.openai_base_url,
               "KIMI_CODE_NO_AUTO_UPDATE": "1", "NO_UPDATE_NOTIFIER": "1"}
        effort = request_fields(model).get("reasoning_effort")
        if effort:
            env["KIMI_MODEL_THINKING_EFFORT"] = str(effort)
        return env

    def command(self, model: "ModelConfig", workdir: str) -> str:
        return f'kimi --output-format stream-json {self.extra_args} -p "$(cat "$PROMPT_FILE")"'

    def read_usage(self, stdout: str) -> Usage:
        calls = sum(1 for e in json_events(stdout) if e.get("role") == "assistant")
        return Usage(model_calls=calls, cost_known=False)

    def endpoint_error(self, output: str) -> str | None:
        return status_verdict(STATUS, output)
