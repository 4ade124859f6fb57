"""acp: any agent that speaks the Agent Client Protocol (JSON-RPC over stdio), driven inside the sandbox.

The long tail of agents without a harness each (Harbor's `-a acp:NAME`). The agent is a command line in the sandbox
(`agent`): a console script of a PyPI package the harness bundles (`package`, pinned), a file uploaded beside it
(`upload`), or a program the task image already has. Our client (harnesses/acp_client.py, the standard library only)
runs on the bundled interpreter (harnesses/py_bundle.py), so the image needs no Python and no network: it starts the
agent, initializes it with file and terminal capabilities, authenticates when the agent offers a method whose
variables are set, opens a session in the task's workdir, chooses the model when the session advertises a choice,
sends the task's instruction as one prompt and serves the agent's permission, file and terminal requests (every
permission granted, as Harbor's default `allow`).

The endpoint reaches the agent as environment variables (`endpoint_env`, OpenAI's and Anthropic's usual names by
default) and, for agents that read a config file, as files under HOME (`config_files`, with {{model}},
{{openai_base_url}}, {{anthropic_base_url}} and {{key_env}} filled in; the key itself only ever in the env file). Usage:
the gateway's metering; without it, the prompt's `usage` the agent returned, priced by the model's prices, and its
`usage_update` cost kept beside as cli_cost_usd. Errors: an HTTP status the agent reported (in a JSON-RPC error or
its stderr) is mapped as the other CLIs' are; an agent that ended the turn with `refusal` is a refusal.
"""

from __future__ import annotations

import re
import shlex
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from agentcompass import __version__
from agentcompass.core.errors import (AgentSafetyRefusalError, ContextWindowExceededError,
                                      OutputLengthExceededError, TrialError, UserError)
from agentcompass.core.models import cli_model_name
from agentcompass.core.schema import Strict
from agentcompass.core.task import Usage
from agentcompass.harnesses.cli_bundle import INSTALL_TIMEOUT_S
from agentcompass.harnesses.installed import (AGENT_DIR, HOME_DIR, InstalledAgent, json_events, last_output,
                                             status_verdict)
from agentcompass.harnesses.py_bundle import find_python, py_bundle
from agentcompass.harnesses.py_cli import unpack

if TYPE_CHECKING:
    from agentcompass.core.sandbox import Sandbox
    from agentcompass.core.schema import ModelConfig

KEY_ENV = "AGENTCOMPASS_API_KEY"
FILES_DIR = f"{AGENT_DIR}/files"
CLIENT = f"{HOME_DIR}/acp_client.py"
# An HTTP status as agents and their SDKs print it: "HTTP 401", "HTTP Error 429", "status code 503", "status: 404".
STATUS = re.compile(r"(?:\bHTTP(?:\s+Error)?|status(?:[ _]code)?|\"status\")[\s:=]+(\d{3})\b", re.IGNORECASE)
PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")  # {{model}} in config_files (${...} is the config's own interpolation)
CONTEXT = re.compile(r"context_length_exceeded|maximum context length|context window", re.IGNORECASE)
DEFAULT_ENDPOINT_ENV = {"OPENAI_BASE_URL": "openai_base_url", "OPENAI_API_KEY": "api_key",
                        "ANTHROPIC_BASE_URL": "anthropic_base_url", "ANTHROPIC_API_KEY": "api_key"}


class AcpHarness(InstalledAgent):
    name, command_name = "acp", "acp"
    package = "acp"  # named in messages; the agent's own package is `settings.package`
    model_apis = ("openai", "anthropic")

    class Settings(Strict):
        agent: str  # the agent's command line in the sandbox (shell words); bundled console scripts are on PATH
        package: str | None = None  # the PyPI requirement that installs the agent, pinned: NAME==VERSION
        python: str = "3.12"  # the CPython minor version bundled (the package's Requires-Python)
        python_path: str | None = None  # the host's CPython of that version; default: on PATH or under pyenv
        upload: dict[str, str] = Field(default_factory=dict)  # name under $AGENT_FILES in the sandbox -> local file
        endpoint_env: dict[str, Literal["openai_base_url", "anthropic_base_url", "api_key", "model"]] = Field(
            default_factory=lambda: dict(DEFAULT_ENDPOINT_ENV))  # env var -> the endpoint value it carries
        config_files: dict[str, str] = Field(default_factory=dict)  # path under HOME -> text ({{model}}, ...)
        permission: Literal["allow", "deny"] = "allow"  # the answer to the agent's permission requests
        timeout_s: float | None = Field(None, gt=0)  # default: the task's agent timeout
        env: dict[str, str] = Field(default_factory=dict)  # added to the agent's environment
        cache_dir: str | None = None  # where bundles are kept; default: the agentcompass cache
        models: dict[str, list[str]] | None = None  # model id -> tiers the agent knows; None: any

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        if self.settings.agent.strip() in ("", "???"):
            raise UserError("harness 'acp' needs the agent's command line: pass harness.agent=COMMAND (e.g. vibe-acp, "
                            "with harness.package=mistral-vibe==3.0.1 to bundle it from PyPI)")
        package = self.settings.package
        if package is not None and not re.fullmatch(r"[A-Za-z0-9._\-\[\],]+==[A-Za-z0-9.+!\-]+", package):
            raise UserError(f"harness.package {package!r} is not pinned; write NAME==VERSION (pip index versions NAME "
                            "lists them)")
        for name, path in self.settings.upload.items():
            if "/" in name or not Path(path).expanduser().is_file():
                raise UserError(f"harness.upload: {name!r} -> {path!r} must map a plain file name to a file on this "
                                "machine")
        # Cheap and before any download: a host that cannot make the bundle refuses the run in one line.
        self.python = find_python(self.settings.python, self.settings.python_path)

    def prepare(self) -> None:
        cache = Path(self.settings.cache_dir).expanduser() if self.settings.cache_dir else None
        requirements = (self.settings.package,) if self.settings.package else ()
        self.archive = py_bundle(requirements, self.python, cache)

    def install(self, sandbox: "Sandbox", timeout_s: float = INSTALL_TIMEOUT_S) -> None:
        if self.archive is None:
            self.prepare()
        assert self.archive is not None
        for name, path in self.settings.upload.items():
            sandbox.upload(Path(path).expanduser(), f"{FILES_DIR}/{name}")
        unpack(sandbox, self.archive, f"{self.interpreter} -I -c 'import json, subprocess, threading'",
               "the ACP agent's bundle", timeout_s)

    @property
    def interpreter(self) -> str:
        return f"{AGENT_DIR}/py/bin/python{self.python.version}"

    def api_kind(self, model: "ModelConfig") -> str:
        return "messages" if model.api == "anthropic" else "chat"

    def endpoint_values(self, model: "ModelConfig", endpoint: Any) -> dict[str, str]:
        return {"openai_base_url": endpoint.openai_base_url, "anthropic_base_url": endpoint.anthropic_base_url,
                "api_key": endpoint.api_key, "model": cli_model_name(model)}

    def config_files(self, model: "ModelConfig", endpoint: Any) -> dict[str, str]:
        values = {k: v for k, v in self.endpoint_values(model, endpoint).items() if k != "api_key"}
        values["key_env"] = KEY_ENV
        files = {path: PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), text)
                 for path, text in self.settings.config_files.items()}
        return {**files, "acp_client.py": resources.files("agentcompass.harnesses").joinpath("acp_client.py").read_text()}

    def cli_env(self, model: "ModelConfig", endpoint: Any) -> dict[str, str]:
        values = self.endpoint_values(model, endpoint)
        return {KEY_ENV: endpoint.api_key, "AGENT_DIR": AGENT_DIR, "AGENT_FILES": FILES_DIR,
                **{name: values[value] for name, value in self.settings.endpoint_env.items()}}

    def command(self, model: "ModelConfig", workdir: str) -> str:
        return (f'{self.interpreter} -I {CLIENT} --prompt-file "$PROMPT_FILE" --model {shlex.quote(cli_model_name(model))} '
                f"--permission {self.settings.permission} --client-version {__version__} -- {self.settings.agent}")

    def read_usage(self, stdout: str) -> Usage:
        usage = Usage(cost_known=False)
        for event in json_events(stdout):
            if event.get("type") != "result":
                continue
            tokens = event.get("usage") or {}
            usage.tokens_in = int(tokens.get("inputTokens") or 0)
            usage.tokens_out = int(tokens.get("outputTokens") or 0) + int(tokens.get("thoughtTokens") or 0)
            usage.tokens_cached = int(tokens.get("cachedReadTokens") or 0)
            usage.tokens_cache_write = int(tokens.get("cachedWriteTokens") or 0)
            cost = (event.get("usageUpdate") or {}).get("cost") or {}
            if str(cost.get("currency", "")).upper() == "USD" and isinstance(cost.get("amount"), (int, float)):
                usage.cli_cost_usd = float(cost["amount"])
        return usage

    def endpoint_error(self, output: str) -> str | None:
        return status_verdict(STATUS, output)

    def classify(self, code: int, timed_out: bool, stdout: str, stderr: str, limit: float | None,
                 metered: dict[str, Any] | None) -> TrialError | None:
        """The shared table (installed.py), then what only ACP says: the context window (an error the agent passed
        on), and the prompt turn's stop reason: `refusal` (the model refused) and `max_tokens` (cut at the output
        limit), both graded as Harbor grades those classes."""
        ended_badly = timed_out or code != 0
        if ended_badly and CONTEXT.search(f"{stdout}\n{stderr}") and not (metered and metered.get("capped")):
            return ContextWindowExceededError(f"{self.name}: the conversation outgrew the model's context window; "
                                              f"last output: {last_output(stdout, stderr)}")
        error = super().classify(code, timed_out, stdout, stderr, limit, metered)
        if error is not None:
            return error
        result = next((e for e in reversed(json_events(stdout)) if e.get("type") == "result"), {})
        agent = self.settings.agent.split()[0] if self.settings.agent.split() else self.name
        if result.get("stopReason") == "refusal":
            return AgentSafetyRefusalError(f"{agent} ended the turn refusing the task (ACP stopReason refusal)")
        if result.get("stopReason") == "max_tokens":
            return OutputLengthExceededError(f"{agent} ended the turn at the model's output limit (ACP stopReason "
                                             "max_tokens)")
        return None
