"""Short names for the built-in implementations, with a dotted-path fallback.

Imports are lazy so that heavy SDKs load only when their implementation is used.
"""

from __future__ import annotations

import difflib
import importlib
from typing import Any

from agentcompass.errors import UserError

BUILTINS: dict[str, dict[str, str]] = {
    "provider": {
        "local": "agentcompass.providers.local:LocalProvider",
        "docker": "agentcompass.providers.docker:DockerProvider",
        "modal": "agentcompass.providers.modal:ModalProvider",
        "gcp": "agentcompass.providers.gcp:GcpProvider",
    },
    "format": {
        "harbor": "agentcompass.formats.harbor:HarborFormat",
        "swebench": "agentcompass.formats.swebench:SwebenchFormat",
        "terminal_bench": "agentcompass.formats.terminal_bench:TerminalBenchFormat",
    },
    "harness": {
        "oracle": "agentcompass.harnesses.oracle:OracleHarness",
        "nop": "agentcompass.harnesses.nop:NopHarness",
        "mini_swe_agent": "agentcompass.harnesses.mini_swe_agent:MiniSweAgentHarness",
        "predictions": "agentcompass.harnesses.predictions:PredictionsHarness",
    },
}


def closest(name: str, choices: list[str]) -> str:
    """' (did you mean X?)' or '' — appended to unknown-name messages."""
    match = difflib.get_close_matches(name, choices, n=1, cutoff=0.5)
    return f"; did you mean '{match[0]}'?" if match else ""


def resolve(kind: str, name: str) -> Any:
    """The class behind a short name (`docker`) or a dotted path (`pkg.mod:Class`)."""
    path = BUILTINS[kind].get(name)
    if path is None:
        if "." not in name and ":" not in name:
            choices = sorted(BUILTINS[kind])
            raise UserError(
                f"unknown {kind} implementation '{name}'; built-in: {', '.join(choices)}, "
                f"or a dotted path 'package.module:Class'{closest(name, choices)}"
            )
        path = name
    module_name, _, attr = path.partition(":") if ":" in path else path.rpartition(".")
    try:
        module = importlib.import_module(module_name)
        return getattr(module, attr)
    except (ImportError, AttributeError) as exc:
        raise UserError(f"cannot load {kind} '{name}' ({path}): {exc}") from exc
