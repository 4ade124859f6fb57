"""opencode: the `opencode-ai` CLI, `opencode run --format json`, on an OpenAI-compatible or Anthropic endpoint.

The endpoint is a provider of its own in opencode's config (OPENCODE_CONFIG): `@ai-sdk/openai-compatible`
or `@ai-sdk/anthropic`, both bundled in the binary, the key read from the environment (`{env:...}`).
Every tool is allowed; autoupdate, sharing, the models.dev fetch, LSP downloads and default plugins are off.
Usage without the gateway: the `step_finish` events' tokens (input excludes cache reads and writes there), priced
by the model's prices; its own cost figure is kept beside as cli_cost_usd.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from agentcompass.core.models import cli_model_name
from agentcompass.harnesses.installed import HOME_DIR, InstalledAgent, json_events
from agentcompass.core.task import Usage

if TYPE_CHECKING:
    from agentcompass.core.schema import ModelConfig

PROVIDER = "agentcompass"
KEY_ENV = "AGENTCOMPASS_API_KEY"
AUTH = re.compile(r'"statusCode":\s*40[13]\b')
OUTAGE = re.compile(r'"statusCode":\s*5\d\d\b|message="stream error"')


class OpencodeHarness(InstalledAgent):
    name, package, command_name = "opencode", "opencode-ai", "opencode"
    binary = "opencode-linux-x64/bin/opencode"
    model_apis = ("openai", "anthropic")
    log_files = f"{HOME_DIR}/.local/share/opencode/log/*.log"  # written as it goes; a pipe's buffer dies with a kill

    def api_kind(self, model: "ModelConfig") -> str:
        return "messages" if model.api == "anthropic" else "chat"

    def config_files(self, model: "ModelConfig", endpoint: Any) -> dict[str, str]:
        model_id = cli_model_name(model)
        if model.api == "anthropic":
            npm, base_url = "@ai-sdk/anthropic", f"{endpoint.anthropic_base_url}/v1"
        else:
            npm, base_url = "@ai-sdk/openai-compatible", endpoint.openai_base_url
        config = {
            "$schema": "https://opencode.ai/config.json",
            "autoupdate": False,
            "share": "disabled",
            "permission": {"*": "allow"},
            "provider": {PROVIDER: {"npm": npm, "name": PROVIDER,
                                    "options": {"baseURL": base_url, "apiKey": f"{{env:{KEY_ENV}}}"},
                                    "models": {model_id: {"name": model_id}}}},
            "model": f"{PROVIDER}/{model_id}",
            "small_model": f"{PROVIDER}/{model_id}",
        }
        return {"opencode.json": json.dumps(config, indent=2)}

    def cli_env(self, model: "ModelConfig", endpoint: Any) -> dict[str, str]:
        return {KEY_ENV: endpoint.api_key, "OPENCODE_CONFIG": f"{HOME_DIR}/opencode.json",
                "OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_MODELS_FETCH": "1",
                "OPENCODE_DISABLE_LSP_DOWNLOAD": "1", "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
                "OPENCODE_DISABLE_SHARE": "1"}

    def command(self, model: "ModelConfig", workdir: str) -> str:
        return (f'opencode run --format json --log-level WARN --model {PROVIDER}/{cli_model_name(model)} '
                f'{self.extra_args} "$(cat "$PROMPT_FILE")"')

    def read_usage(self, stdout: str) -> Usage:
        usage = Usage(cost_known=False)
        for event in json_events(stdout):
            part = event.get("part") or {}
            if event.get("type") != "step_finish":
                continue
            tokens = part.get("tokens") or {}
            cache = tokens.get("cache") or {}
            usage.model_calls += 1
            usage.tokens_in += int(tokens.get("input", 0)) + int(cache.get("read", 0)) + int(cache.get("write", 0))
            usage.tokens_cached += int(cache.get("read", 0))
            usage.tokens_cache_write += int(cache.get("write", 0))
            usage.tokens_out += int(tokens.get("output", 0)) + int(tokens.get("reasoning", 0))
            if isinstance(part.get("cost"), (int, float)):  # its own estimate, from its model list's prices
                usage.cli_cost_usd = (usage.cli_cost_usd or 0.0) + float(part["cost"])
        return usage

    def endpoint_error(self, output: str) -> str | None:
        if AUTH.search(output):
            return "auth"
        return "outage" if OUTAGE.search(output) else None
