"""claude_code: the `@anthropic-ai/claude-code` CLI, `claude -p --output-format stream-json`, on an Anthropic endpoint.

ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY come from the env file; permissions are skipped (IS_SANDBOX=1
allows that as root); the background model is the same model; autoupdate, telemetry, error reports and
other non-essential traffic are off. A thinking tier's `budget_tokens` becomes MAX_THINKING_TOKENS, a tier without
thinking MAX_THINKING_TOKENS=0, so the CLI sends the tier itself (on modal/gcp without the gateway too).
Usage without the gateway: the final `result` event (tokens, turns, API time), priced by the model's prices;
its own cost estimate (`total_cost_usd`) is kept beside as cli_cost_usd.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from agentcompass.core.models import cli_model_name
from agentcompass.harnesses.installed import InstalledAgent, json_events, status_verdict
from agentcompass.core.models import request_fields
from agentcompass.core.task import Usage

if TYPE_CHECKING:
    from agentcompass.core.schema import ModelConfig

STATUS = re.compile(r'"(?:api_)?error_status":\s*(\d{3})')


def thinking_tokens(model: "ModelConfig") -> int | None:
    """The tier as Claude Code's own setting: MAX_THINKING_TOKENS, the budget of an enabled thinking, or 0 for a tier
    without one (2.1.332 then sends `thinking: {type: disabled}` and no clear_thinking edit; unset, it thinks with a
    31,999-token budget whatever the tier). None: no tier, the CLI's default stands."""
    if model.reasoning is None:
        return None
    thinking = request_fields(model).get("thinking") or {}
    return int(thinking["budget_tokens"]) if thinking.get("type") == "enabled" and thinking.get("budget_tokens") else 0


class ClaudeCodeHarness(InstalledAgent):
    name, package, command_name = "claude_code", "@anthropic-ai/claude-code", "claude"
    binary = "@anthropic-ai/claude-code-linux-x64/claude"
    model_apis = ("anthropic",)

    def api_kind(self, model: "ModelConfig") -> str:
        return "messages"

    def cli_env(self, model: "ModelConfig", endpoint: Any) -> dict[str, str]:
        model_id = cli_model_name(model)
        env = {"ANTHROPIC_BASE_URL": endpoint.anthropic_base_url, "ANTHROPIC_API_KEY": endpoint.api_key,
               "ANTHROPIC_SMALL_FAST_MODEL": model_id, "ANTHROPIC_DEFAULT_HAIKU_MODEL": model_id,
               "IS_SANDBOX": "1", "DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1",
               "DISABLE_ERROR_REPORTING": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
        budget = thinking_tokens(model)
        if budget is not None:
            env["MAX_THINKING_TOKENS"] = str(budget)
        return env

    def command(self, model: "ModelConfig", workdir: str) -> str:
        return (f"claude -p --output-format stream-json --verbose --dangerously-skip-permissions "
                f'--model {cli_model_name(model)} {self.extra_args} < "$PROMPT_FILE"')

    def read_usage(self, stdout: str) -> Usage:
        results = [e for e in json_events(stdout) if e.get("type") == "result"]
        if not results:
            return Usage(cost_known=False)
        result = results[-1]
        tokens = result.get("usage") or {}
        cached, written = int(tokens.get("cache_read_input_tokens", 0)), int(tokens.get("cache_creation_input_tokens", 0))
        own = result.get("total_cost_usd")
        return Usage(model_calls=int(result.get("num_turns", 0)),
                     tokens_in=int(tokens.get("input_tokens", 0)) + cached + written,
                     tokens_out=int(tokens.get("output_tokens", 0)), tokens_cached=cached, tokens_cache_write=written,
                     cli_cost_usd=float(own) if isinstance(own, (int, float)) else None,
                     generation_s=float(result.get("duration_api_ms") or 0) / 1000)

    def endpoint_error(self, output: str) -> str | None:
        return status_verdict(STATUS, output)
