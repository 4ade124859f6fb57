"""kimi_cli: Moonshot's `kimi-cli` (PyPI), `kimi --print --output-format stream-json`, on an OpenAI-compatible
chat-completions endpoint.

Why print mode and not its ACP server: `kimi acp` refuses `session/new` without a Kimi account's OAuth token, while
print mode runs any provider its config names. The config (`~/.kimi/config.toml` under the agent's HOME) names the
endpoint as a provider of type `openai_legacy` (its name for chat completions) and the model as the default one,
with an empty key: kimi-cli itself takes OPENAI_API_KEY and OPENAI_BASE_URL from its environment over a provider of
that type, so the key is only in the env file (mode 600), in no config file and on no command line. Print mode runs
every tool without asking; the prompt comes on stdin (no length limit of the command line). Telemetry is off.

Usage: its stream-json prints the conversation's messages without token counts, so tokens and cost come from the
gateway only (without one, model calls are counted and the cost is unknown). Errors: a failed model call ends the
run with the OpenAI SDK's message on stdout (`Error code: 401 - {...}`, `Connection error.`, `Request timed out.`)
and exit 1 (75 when kimi-cli deems it retryable: 429, 5xx, unreachable).

1.51.0 is the last release that runs: kimi-cli is archived, and its final 1.52.0 is a stub whose every command line
prints a notice and exits 0 (run bare, it fetches and runs an installer of its successor from the internet), so an
attempt with it would end "completed" having done nothing. The harness refuses it and any later version up front.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from pydantic import Field

from agentcompass.core.errors import TrialError, UserError
from agentcompass.core.models import cli_model_name
from agentcompass.core.task import Usage
from agentcompass.harnesses.installed import HOME_DIR, json_events, status_verdict
from agentcompass.harnesses.node_agent import context_window_error
from agentcompass.harnesses.py_cli import PythonCliAgent

if TYPE_CHECKING:
    from agentcompass.core.schema import ModelConfig

CONFIG_FILE = ".kimi/config.toml"  # kimi-cli's default config path, under its HOME
STATUS = re.compile(r"Error code: (\d{3})\b")
# The OpenAI SDK's messages for a call that got no answer (kimi-cli prints them as they are).
LAST_WORKING = (1, 51)  # 1.52.0, the final release, only prints a deprecation notice
UNREACHABLE = re.compile(r"^(?:Connection error\.|Request timed out\.)$", re.MULTILINE)


def config_toml(model_id: str, base_url: str, context_tokens: int) -> str:
    """kimi-cli's config: one openai_legacy provider and one model, the default. JSON strings are TOML strings."""
    q = json.dumps
    return (f"default_model = {q(model_id)}\n"
            "default_thinking = false\n"
            "telemetry = false\n\n"
            "[providers.agentcompass]\n"
            'type = "openai_legacy"\n'
            f"base_url = {q(base_url)}\n"
            'api_key = ""  # read from OPENAI_API_KEY\n\n'
            f"[models.{q(model_id)}]\n"
            'provider = "agentcompass"\n'
            f"model = {q(model_id)}\n"
            f"max_context_size = {context_tokens}\n")


class KimiCliHarness(PythonCliAgent):
    name, package, command_name, python = "kimi_cli", "kimi-cli", "kimi", "3.13"
    model_apis = ("openai",)
    log_files = f"{HOME_DIR}/.kimi/logs/*.log"
    reports_tokens = False

    class Settings(PythonCliAgent.Settings):
        # kimi-cli compacts the conversation before it reaches this many tokens (it must be told the window)
        max_context_size: int = Field(262_144, gt=1000)

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        release = tuple(int(part) for part in re.findall(r"\d+", self.settings.version)[:2])
        if release > LAST_WORKING:
            raise UserError(f"harness.version={self.settings.version}: kimi-cli 1.52.0 and later only print a "
                            f"deprecation notice and run nothing; use 1.51.0 (the last working release), or the "
                            f"kimi_code harness for its successor")

    def api_kind(self, model: "ModelConfig") -> str:
        return "chat"

    def config_files(self, model: "ModelConfig", endpoint: Any) -> dict[str, str]:
        return {CONFIG_FILE: config_toml(cli_model_name(model), endpoint.openai_base_url,
                                         self.settings.max_context_size)}

    def cli_env(self, model: "ModelConfig", endpoint: Any) -> dict[str, str]:
        # Both set here, so an OPENAI_BASE_URL of the task image never takes the calls past the gateway.
        return {"OPENAI_API_KEY": endpoint.api_key, "OPENAI_BASE_URL": endpoint.openai_base_url,
                "KIMI_DISABLE_TELEMETRY": "1", "COLUMNS": "4096"}  # its errors printed unwrapped, read whole

    def command(self, model: "ModelConfig", workdir: str) -> str:
        return f'kimi --print --output-format stream-json {self.extra_args} < "$PROMPT_FILE"'

    def read_usage(self, stdout: str) -> Usage:
        calls = sum(1 for e in json_events(stdout) if e.get("role") == "assistant")
        return Usage(model_calls=calls, cost_known=False)

    def endpoint_error(self, output: str) -> str | None:
        seen = status_verdict(STATUS, output)
        return seen or ("outage" if UNREACHABLE.search(output) else None)

    def classify(self, code: int, timed_out: bool, stdout: str, stderr: str, limit: float | None,
                 metered: dict[str, Any] | None) -> TrialError | None:
        error = super().classify(code, timed_out, stdout, stderr, limit, metered)
        return context_window_error(self.name, error, f"{stdout}\n{stderr}")
