"""A simulated provider for benchmarks/scale.py: sandboxes that cost only fixed latencies.

Opening a sandbox sleeps `open_s`, each command sleeps `command_s` and succeeds; uploads are
free, downloading the verifier's folder yields a passing reward, and every other path is absent,
as in a sandbox where the agent left no artifacts. Nothing else is done, so
whatever a trial takes beyond these sleeps is the orchestrator's own overhead. Loaded through a
provider YAML's dotted `impl: sim_provider:SimProvider` (benchmarks/ on PYTHONPATH); it is
never a built-in.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from agentcompass.core.durable import write_file
from agentcompass.core.sandbox import ExecResult, SandboxSpec


class SimSandbox:
    def __init__(self, command_s: float) -> None:
        self.command_s = command_s

    def exec(self, cmd: str, *, cwd: str | None = None, env: dict[str, str] | None = None,
             timeout: float | None = None, user: str | None = None) -> ExecResult:
        time.sleep(self.command_s)
        return ExecResult(exit_code=0, duration_s=self.command_s)

    def upload(self, local: Path, remote: str) -> None:
        pass

    def download(self, remote: str, local: Path) -> None:
        if remote != "/logs/verifier":
            raise FileNotFoundError(remote)
        local.mkdir(parents=True, exist_ok=True)
        write_file(os.path.join(local, "reward.txt"), b"1\n")

    def close(self) -> None:
        pass


class SimProvider:
    name = "sim"
    fork_safe = True  # nothing but sleeps: trials may run in worker processes (agentcompass.core.shards)
    Settings = None

    def __init__(self, open_s: float = 0.2, command_s: float = 0.05, keep: bool = False, **_: Any) -> None:
        self.open_s, self.command_s = float(open_s), float(command_s)

    def check(self, spec: SandboxSpec) -> None:
        pass

    def open(self, spec: SandboxSpec) -> SimSandbox:
        time.sleep(self.open_s)
        return SimSandbox(self.command_s)
