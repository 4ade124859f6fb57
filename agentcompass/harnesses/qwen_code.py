"""qwen_code: the `@qwen-code/qwen-code` CLI (Node, brought in its bundle), `qwen --output-format stream-json`, on an
OpenAI-compatible chat-completions endpoint.

The endpoint is Qwen Code's `openai` auth type: OPENAI_BASE_URL, OPENAI_API_KEY and OPENAI_MODEL from the env file,
so neither the key nor the URL is on a command line. Every tool is allowed (`--yolo`: the trial's sandbox is the
isolation); telemetry, usage statistics and the update check are off in its settings.json. It does not relaunch
itself in a second Node for a bigger heap (QWEN_CODE_NO_RELAUNCH): two Nodes outgrow a 512 MB task and get OOM-killed. Qwen Code sends no tier of
its own: through the gateway a tier's fields are added to each call, as for opencode. Usage without the gateway: the
final `result` event's tokens (input includes cache reads), priced by the model's prices (it reports no cost).
An endpoint error is printed as `[API Error: STATUS message]`, a context-window refusal by its message.
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

STATUS = re.compile(r"\[API Error: (\d{3})\b")
SETTINGS = {"general": {"disableAutoUpdate": True, "disableUpdateNag": True},
            "privacy": {"usageStatisticsEnabled": False}, "telemetry": {"enabled": False},
            "security": {"auth": {"selectedType": "openai"}}}


class QwenCodeHarness(NodeInstalledAgent):
    name, package, command_name = "qwen_code", "@qwen-code/qwen-code", "qwen"
    model_apis = ("openai",)

    def api_kind(self, model: "ModelConfig") -> str:
        return "chat"

    def config_files(self, model: "ModelConfig", endpoint: Any) -> dict[str, str]:
        return {".qwen/settings.json": json.dumps(SETTINGS, indent=2)}

    def cli_env(self, model: "ModelConfig", endpoint: Any) -> dict[str, str]:
        return {"OPENAI_API_KEY": endpoint.api_key, "OPENAI_BASE_URL": endpoint.openai_base_url,
                "OPENAI_MODEL": cli_model_name(model), "QWEN_CODE_SUPPRESS_YOLO_WARNING": "1",
                "NO_UPDATE_NOTIFIER": "1", "QWEN_CODE_NO_RELAUNCH": "1"}

    def command(self, model: "ModelConfig", workdir: str) -> str:
        return (f"qwen --yolo --output-format stream-json --auth-type openai --model {cli_model_name(model)} "
                f'{self.extra_args} "$(cat "$PROMPT_FILE")"')

    def read_usage(self, stdout: str) -> Usage:
        results = [e for e in json_events(stdout) if e.get("type") == "result"]
        if not results:
            return Usage(cost_known=False)
        result = results[-1]
        tokens = result.get("usage") or {}
        return Usage(model_calls=int(result.get("num_turns", 0)), tokens_in=int(tokens.get("input_tokens", 0)),
                     tokens_out=int(tokens.get("output_tokens", 0)),
                     tokens_cached=int(tokens.get("cache_read_input_tokens", 0)),
                     generation_s=float(result.get("duration_api_ms") or 0) / 1000, cost_known=False)

    def endpoint_error(self, output: str) -> str | None:
        return status_verdict(STATUS, output)
