"""Short names for the built-in implementations, with a dotted-path fallback.

Imports are lazy so that heavy SDKs load only when their implementation is used. An
implementation that needs an optional extra says so (`extra = "swebench"`, `extra_modules =
("swebench", "datasets")`); resolving it checks those modules are installed (by
`importlib.util.find_spec`, which imports nothing) so a missing one is one line before any run.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
from typing import Any

from agentcompass.core.errors import UserError

BUILTINS: dict[str, dict[str, str]] = {
    "provider": {
        "local": "agentcompass.providers.local.provider:LocalProvider",
        "docker": "agentcompass.providers.docker.provider:DockerProvider",
        "podman": "agentcompass.providers.podman.provider:PodmanProvider",
        "modal": "agentcompass.providers.modal.provider:ModalProvider",
        "gcp": "agentcompass.providers.gcp.provider:GcpProvider",
        "kubernetes": "agentcompass.providers.kubernetes.provider:KubernetesProvider",
        "gcp_batch": "agentcompass.providers.gcp.eval:GcpBatchProvider",  # eval/validate on gcp
    },
    "format": {
        "cooperbench": "agentcompass.formats.cooperbench.format:CooperbenchFormat",
        "harbor": "agentcompass.formats.harbor.format:HarborFormat",
        "swebench": "agentcompass.formats.swebench.format:SwebenchFormat",
        "swebench_pro": "agentcompass.formats.swebench_pro.format:SwebenchProFormat",
        "terminal_bench": "agentcompass.formats.terminal_bench.format:TerminalBenchFormat",
    },
    "harness": {
        "oracle": "agentcompass.harnesses.oracle:OracleHarness",
        "nop": "agentcompass.harnesses.nop:NopHarness",
        "mini_swe_agent": "agentcompass.harnesses.mini_swe_agent:MiniSweAgentHarness",
        "predictions": "agentcompass.harnesses.predictions:PredictionsHarness",
        "opencode": "agentcompass.harnesses.opencode:OpencodeHarness",
        "claude_code": "agentcompass.harnesses.claude_code:ClaudeCodeHarness",
        "codex": "agentcompass.harnesses.codex:CodexHarness",
        "acp": "agentcompass.harnesses.acp:AcpHarness",
        "aider": "agentcompass.harnesses.aider:AiderHarness",
        "mistral_vibe": "agentcompass.harnesses.mistral_vibe:MistralVibeHarness",
        "kimi_cli": "agentcompass.harnesses.kimi_cli:KimiCliHarness",
        "qwen_code": "agentcompass.harnesses.qwen_code:QwenCodeHarness",
        "cline": "agentcompass.harnesses.cline:ClineHarness",
        "kimi_code": "agentcompass.harnesses.kimi_code:KimiCodeHarness",
        "copilot_cli": "agentcompass.harnesses.copilot_cli:CopilotCliHarness",
        "gemini_cli": "agentcompass.harnesses.gemini_cli:GeminiCliHarness",
    },
    # What a run uses beyond its three implementations, found by name as they are, so that the core
    # imports no package above it (tests/test_architecture.py): the model gateway and the cost split.
    "service": {
        "gateway": "agentcompass.gateway.server:Gateway",
        "gateway_check": "agentcompass.gateway.server:check_gateway",
        "endpoint_check": "agentcompass.gateway.check:check_endpoint",
        "settle_costs": "agentcompass.report.runcost:settle",
        "named_endpoint": "agentcompass.endpoints.lifecycle:resolve_named",
    },
}


NOUNS = {"format": "benchmark format", "provider": "env"}  # what a user calls each kind


def closest(name: str, choices: list[str]) -> str:
    """' (did you mean X?)' or '' — appended to unknown-name messages."""
    match = difflib.get_close_matches(name, choices, n=1, cutoff=0.5)
    return f"; did you mean '{match[0]}'?" if match else ""


def resolve(kind: str, name: str) -> Any:
    """The class behind a short name (`docker`) or a dotted path (`pkg.mod:Class`), its extra checked."""
    implementation = load(kind, name)
    check_extra(implementation, f"{NOUNS.get(kind, kind)} '{name}'")
    return implementation


def load(kind: str, name: str) -> Any:
    """The class behind a name, without checking that its optional packages are installed."""
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


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a dotted name whose parent is missing
        return False


def check_extra(implementation: Any, what: str) -> None:
    """Raise one line naming the pip install when an optional module the implementation needs is missing."""
    missing = [m for m in getattr(implementation, "extra_modules", ()) if not installed(m)]
    if not missing:
        return
    extra = getattr(implementation, "extra", None)
    from agentcompass.core.install import pip_install

    fix = pip_install(extra) if extra else f"pip install {' '.join(missing)}"
    raise UserError(f"{what} needs {', '.join(missing)}, not installed here; {fix}")
