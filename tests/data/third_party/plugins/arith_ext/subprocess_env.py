"""An env: each sandbox is a fresh temporary directory on this machine, its commands plain subprocesses."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from agentcompass.api import ExecResult, InfraError, SandboxSpec, Strict, UserError


class SubprocessSandbox:
    def __init__(self, root: Path, env: dict[str, str]) -> None:
        self.root = root
        self.env = env

    def path(self, remote: str) -> Path:
        """A sandbox path ('/answer.txt' or 'answer.txt') inside this sandbox's directory."""
        return self.root / remote.lstrip("/")

    def exec(self, cmd: str, *, cwd: str | None = None, env: dict[str, str] | None = None,
             timeout: float | None = None, user: str | None = None) -> ExecResult:
        start = time.monotonic()
        try:
            done = subprocess.run(["/bin/sh", "-c", cmd], cwd=self.path(cwd or ""), capture_output=True, text=True,
                                  env={**self.env, **(env or {})}, timeout=timeout)
        except subprocess.TimeoutExpired:
            return ExecResult(exit_code=-1, timed_out=True, duration_s=time.monotonic() - start)
        except OSError as exc:  # the sandbox is gone: the environment's fault, retried
            raise InfraError(f"cannot run a command in {self.root}: {exc}") from exc
        return ExecResult(done.returncode, done.stdout, done.stderr, duration_s=time.monotonic() - start)

    def upload(self, local: Path, remote: str) -> None:
        target = self.path(remote)
        target.parent.mkdir(parents=True, exist_ok=True)
        if local.is_dir():
            shutil.copytree(local, target, symlinks=True, dirs_exist_ok=True)
        else:
            shutil.copy2(local, target)

    def download(self, remote: str, local: Path) -> list[str]:
        """Regular files only: a link could point out of the sandbox, so it is refused, never followed."""
        source = self.path(remote)
        if not source.exists() and not source.is_symlink():
            raise FileNotFoundError(remote)
        files = [source] if not source.is_dir() else sorted(p for p in source.rglob("*") if not p.is_dir())
        refused = []
        for file in files:
            relative = file.relative_to(source) if source.is_dir() else Path(file.name)
            if file.is_symlink() or not file.is_file():
                refused.append(str(relative))
                continue
            target = local / relative if source.is_dir() else local
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(file, target)
        return refused

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


class SubprocessProvider:
    name = "subprocess"

    class Settings(Strict):  # the env's own keys in its YAML: a typo fails before the run
        path: str = "/usr/bin:/bin"

    def __init__(self, path: str = "/usr/bin:/bin", keep: bool = False) -> None:
        self.search_path = path

    def check(self, spec: SandboxSpec) -> None:
        if not spec.runs_on_host:
            raise UserError(f"task '{spec.name}' needs an image; the subprocess env runs host tools only")

    def open(self, spec: SandboxSpec) -> SubprocessSandbox:
        root = Path(tempfile.mkdtemp(prefix="subprocess-env-"))
        return SubprocessSandbox(root, {"PATH": self.search_path, "HOME": str(root), **spec.env})
