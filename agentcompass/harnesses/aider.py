"""aider: the `aider-chat` CLI (PyPI), `aider --yes-always --message-file`, on an OpenAI-compatible or Anthropic endpoint.

aider 0.86 needs Python <= 3.12, so it runs on the bundled CPython 3.12 (harnesses/py_bundle.py), whatever the
image has. As Harbor runs it: a workdir that is not a git repository is first committed as one (aider works on a
repository: its repo map, its auto-commits), then one scripted message, every question answered yes. The endpoint
is a model settings file (`extra_params.api_base` for the model `openai/ID` or `anthropic/ID`, as Harbor delivers
it), the key in the environment (OPENAI_API_KEY or ANTHROPIC_API_KEY); analytics, update checks and release notes
off. Usage without the gateway: the `Tokens: N sent, M received. Cost: $X message, $Y session.` lines it prints
(rounded to thousands past 1k, so the gateway's figures are the ones to trust), its session cost kept as
cli_cost_usd. Errors: aider reports the model API's failures as litellm's exception names and goes on to exit 0,
so the last one it printed, with no edit applied after it, is the attempt's class.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import TYPE_CHECKING, Any

from agentcompass.core.errors import ContextWindowExceededError, TrialError
from agentcompass.core.models import cli_model_name
from agentcompass.core.task import Usage
from agentcompass.harnesses.installed import HOME_DIR, last_output
from agentcompass.harnesses.py_cli import PythonCliAgent

if TYPE_CHECKING:
    from agentcompass.core.schema import ModelConfig

SETTINGS_FILE = f"{HOME_DIR}/aider.model.settings.yml"
TOKENS = re.compile(r"Tokens: ([\d.]+)(k?) sent(?:, ([\d.]+)(k?) cache write)?(?:, ([\d.]+)(k?) cache hit)?, "
                    r"([\d.]+)(k?) received\.(?: Cost: \$([\d.]+) message, \$([\d.]+) session\.)?")
# litellm's exception names, as aider prints them, -> the verdict the shared table maps (installed.py).
LITELLM_ERRORS = {"AuthenticationError": "auth", "PermissionDeniedError": "auth", "NotFoundError": "not_found",
                  "BadRequestError": "bad_request", "UnprocessableEntityError": "bad_request",
                  "RateLimitError": "rate_limit", "InternalServerError": "outage", "ServiceUnavailableError": "outage",
                  "APIConnectionError": "outage", "Timeout": "outage", "APIError": "outage"}
ERROR = re.compile(r"litellm\.(" + "|".join(LITELLM_ERRORS) + r")\b")
CONTEXT = re.compile(r"ContextWindowExceededError|exceeds the .*context window|maximum context length", re.IGNORECASE)
APPLIED = re.compile(r"^Applied edit to ", re.MULTILINE)
# Harbor's snapshot: aider needs a repository; a workdir without one is committed as it was before the agent.
SNAPSHOT = ("if command -v git >/dev/null 2>&1 && ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then "
            "{ git init -q && timeout 120 git add -A && git -c user.name=Agent -c user.email=agent@localhost "
            "commit -q --no-verify --allow-empty -m 'Task files before agent run'; } "
            "|| echo 'agentcompass: could not snapshot the workspace for aider' >&2; fi; ")


EXEC_ARGS = 'exec "$0" "$@"'


def litellm_model(model: "ModelConfig") -> str:
    return f"{'anthropic' if model.api == 'anthropic' else 'openai'}/{cli_model_name(model)}"


def thousands(number: str | None, k: str | None) -> int:
    return round(float(number) * (1000 if k else 1)) if number else 0


class AiderHarness(PythonCliAgent):
    name, package, command_name, python = "aider", "aider-chat", "aider", "3.12"
    model_apis = ("openai", "anthropic")

    def api_kind(self, model: "ModelConfig") -> str:
        return "messages" if model.api == "anthropic" else "chat"

    def config_files(self, model: "ModelConfig", endpoint: Any) -> dict[str, str]:
        base = endpoint.anthropic_base_url if model.api == "anthropic" else endpoint.openai_base_url
        settings = [{"name": litellm_model(model), "extra_params": {"api_base": base}}]
        return {"aider.model.settings.yml": json.dumps(settings, indent=2)}  # JSON is YAML

    def cli_env(self, model: "ModelConfig", endpoint: Any) -> dict[str, str]:
        key = "ANTHROPIC_API_KEY" if model.api == "anthropic" else "OPENAI_API_KEY"
        return {key: endpoint.api_key, "AIDER_ANALYTICS": "false", "AIDER_CHECK_UPDATE": "false",
                "AIDER_SHOW_RELEASE_NOTES": "false", "GIT_TERMINAL_PROMPT": "0",
                "LITELLM_LOCAL_MODEL_COST_MAP": "True"}  # litellm's own copy: no fetch of its price list at start

    def command(self, model: "ModelConfig", workdir: str) -> str:
        # `exec` after the snapshot: the CLI keeps the shell's process id, which the spend-cap watcher stops.
        return (f"sh -c {shlex.quote(SNAPSHOT + EXEC_ARGS)} aider --yes-always --no-pretty --no-fancy-input "
                f"--analytics-disable --no-check-update --no-show-release-notes --no-show-model-warnings "
                f"--model-settings-file {SETTINGS_FILE} --model {shlex.quote(litellm_model(model))} "
                f"--chat-history-file {HOME_DIR}/aider.chat.history.md --input-history-file {HOME_DIR}/aider.input.history "
                f'{self.extra_args} --message-file "$PROMPT_FILE"')

    def read_usage(self, stdout: str) -> Usage:
        usage = Usage(cost_known=False)
        for match in TOKENS.finditer(stdout):
            sent, write, hit, received = (thousands(match.group(i), match.group(i + 1)) for i in (1, 3, 5, 7))
            usage.model_calls += 1
            usage.tokens_in += sent
            usage.tokens_cache_write += write
            usage.tokens_cached += hit
            usage.tokens_out += received
            if match.group(10):
                usage.cli_cost_usd = float(match.group(10))  # the session's running total
        return usage

    def endpoint_error(self, output: str) -> str | None:
        found = ERROR.findall(output)
        return LITELLM_ERRORS[found[-1]] if found else None

    def classify(self, code: int, timed_out: bool, stdout: str, stderr: str, limit: float | None,
                 metered: dict[str, Any] | None) -> TrialError | None:
        """aider exits 0 after a failed model call: a litellm error with no edit applied after it ended the run."""
        output = f"{stdout}\n{stderr}"
        failed = [m.end() for m in ERROR.finditer(output)] + [m.end() for m in CONTEXT.finditer(output)]
        applied = [m.end() for m in APPLIED.finditer(output)]
        gave_up = bool(failed) and (not applied or max(failed) > max(applied))
        if gave_up and CONTEXT.search(output) and not (metered and metered.get("capped")):
            return ContextWindowExceededError(f"{self.name}: the conversation outgrew the model's context window; "
                                              f"last output: {last_output(stdout, stderr)}")
        return super().classify(1 if gave_up and code == 0 else code, timed_out, stdout, stderr, limit, metered)
