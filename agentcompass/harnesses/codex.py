"""codex: the `@openai/codex` CLI, `codex exec --json`, on an endpoint that serves the OpenAI Responses API.

Codex (0.9x and later) speaks only the Responses API (`wire_api = "responses"`; "chat" is refused), so
its endpoint must serve `/v1/responses`: OpenAI does, vLLM and SGLang do. The endpoint is a model
provider of its own in CODEX_HOME/config.toml, the key read from the environment (`env_key`); approvals
and codex's own sandbox are off (the trial's sandbox is the isolation), update checks and analytics off.
A tier's `reasoning_effort` becomes `model_reasoning_effort`. Usage without the gateway: the `turn.completed`
events' tokens, priced by the model's prices (codex reports no cost of its own).
"""

from __future__ import annotations

import json
import re
import shlex
from typing import TYPE_CHECKING, Any

from agentcompass.core.models import cli_model_name
from agentcompass.harnesses.installed import HOME_DIR, InstalledAgent, json_events, status_verdict
from agentcompass.core.models import request_fields
from agentcompass.core.task import Usage

if TYPE_CHECKING:
    from agentcompass.core.schema import ModelConfig

PROVIDER = "agentcompass"
KEY_ENV = "AGENTCOMPASS_API_KEY"
STATUS = re.compile(r"unexpected status (\d{3})")
TOOL_ITEMS = ("command_execution", "file_change", "mcp_tool_call", "web_search")


class CodexHarness(InstalledAgent):
    name, package, command_name = "codex", "@openai/codex", "codex"
    binary = "@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex"
    model_apis = ("openai",)

    def api_kind(self, model: "ModelConfig") -> str:
        return "responses"

    def config_files(self, model: "ModelConfig", endpoint: Any) -> dict[str, str]:
        lines = [f"model = {json.dumps(cli_model_name(model))}", f'model_provider = "{PROVIDER}"',
                 "check_for_update_on_startup = false"]
        effort = request_fields(model).get("reasoning_effort")
        if effort:
            lines.append(f"model_reasoning_effort = {json.dumps(str(effort))}")
        if getattr(endpoint, "hosted_tools", True) is False:  # the gateway refuses OpenAI's web search on this task
            lines.append('web_search = "disabled"')
        lines += ["", f"[model_providers.{PROVIDER}]", f'name = "{PROVIDER}"',
                  f"base_url = {json.dumps(endpoint.openai_base_url)}", f'env_key = "{KEY_ENV}"',
                  'wire_api = "responses"', "", "[analytics]", "enabled = false", ""]
        return {".codex/config.toml": "\n".join(lines)}

    def cli_env(self, model: "ModelConfig", endpoint: Any) -> dict[str, str]:
        return {KEY_ENV: endpoint.api_key, "CODEX_HOME": f"{HOME_DIR}/.codex"}

    def command(self, model: "ModelConfig", workdir: str) -> str:
        return (f"codex exec --json --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox "
                f'-C {shlex.quote(workdir)} {self.extra_args} - < "$PROMPT_FILE"')

    def read_usage(self, stdout: str) -> Usage:
        usage = Usage(cost_known=False)
        for event in json_events(stdout):
            if event.get("type") == "turn.completed":
                tokens = event.get("usage") or {}
                usage.model_calls += 1  # the turn's last reply; each tool call below was one more
                usage.tokens_in += int(tokens.get("input_tokens", 0))
                usage.tokens_cached += int(tokens.get("cached_input_tokens", 0))
                usage.tokens_out += int(tokens.get("output_tokens", 0)) + int(tokens.get("reasoning_output_tokens", 0))
            elif event.get("type") == "item.completed" and (event.get("item") or {}).get("type") in TOOL_ITEMS:
                usage.model_calls += 1
        return usage

    def endpoint_error(self, output: str) -> str | None:
        return status_verdict(STATUS, output)
