"""The local provider: trials run on this machine, each in its own workspace.

Every sandbox path maps to `<workspace>/fs/<path>` (the task's workdir, /tests, /logs, ...).
With bubblewrap the sandbox sees those folders at their real paths over a read-only host
root, with a private /tmp and no network unless the task allows it. Without it (isolation
`none`) commands are plain subprocesses and absolute sandbox paths in commands and staged
text files are rewritten to the workspace, which is enough for well-behaved tasks.
"""

from __future__ import annotations

import atexit
import functools
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Literal

from agentcompass.readiness import local_readiness
from agentcompass.errors import InfraError, UserError
from agentcompass.sandbox import ExecResult, SandboxSpec, cap_output
from agentcompass.schema import Strict

# Host folders a sandbox may never shadow: they hold the tools the commands run with.
SYSTEM_DIRS = {"bin", "boot", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "run", "sbin", "sys", "usr", "var"}
SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_notice_lock = threading.Lock()
_notice_shown = False


class WorkspaceRemover:
    """Deletes closed workspaces on a background thread, off the trials' critical path.

    Removing a directory tree costs more than everything else a tiny trial does; the
    sandbox is already dead when its workspace is queued here, and the queue is drained
    before the process exits, so nothing is left behind.
    """

    def __init__(self) -> None:
        self._queue: queue.Queue[Path] = queue.Queue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def remove(self, path: Path) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="workspace-remover", daemon=True)
                self._thread.start()
                atexit.register(self.drain)
        self._queue.put(path)

    def _loop(self) -> None:
        while True:
            path = self._queue.get()
            shutil.rmtree(path, ignore_errors=True)
            self._queue.task_done()

    def drain(self) -> None:
        self._queue.join()


REMOVER = WorkspaceRemover()


@functools.lru_cache(maxsize=1)
def host_root_binds() -> tuple[tuple[str, tuple[str, ...]], ...]:
    """bwrap arguments that show the host's top-level folders read-only (symlinks as symlinks)."""
    binds = []
    for entry in sorted(os.listdir("/")):
        host = Path("/") / entry
        if entry in {"proc", "dev", "tmp"}:
            continue
        if host.is_symlink():
            binds.append((entry, ("--symlink", os.readlink(host), str(host))))
        elif host.is_dir():
            binds.append((entry, ("--ro-bind", str(host), str(host))))
    return tuple(binds)


class LocalProvider:
    name = "local"
    readiness = staticmethod(local_readiness)  # `env check local`

    class Settings(Strict):
        isolation: Literal["auto", "bwrap", "none"] = "auto"
        root: str | None = None

    def __init__(self, isolation: str = "auto", root: str | None = None, keep: bool = False, **_: object) -> None:
        self.isolation = self._pick_isolation(isolation)
        self.root = Path(root) if root else None
        self.keep = keep

    @staticmethod
    def _pick_isolation(isolation: str) -> str:
        global _notice_shown
        has_bwrap = shutil.which("bwrap") is not None
        if isolation == "bwrap" and not has_bwrap:
            raise UserError("isolation 'bwrap' needs bubblewrap; install it (apt-get install bubblewrap) or pass --env-params '{\"isolation\": \"none\"}'")
        if isolation != "auto":
            return isolation
        if has_bwrap:
            return "bwrap"
        with _notice_lock:
            if not _notice_shown:
                print("notice: bubblewrap (bwrap) is not installed; local trials run as plain subprocesses", file=sys.stderr)
                _notice_shown = True
        return "none"

    def check(self, spec: SandboxSpec) -> None:
        if spec.needs_image:
            what = f"image '{spec.image}'" if spec.image else f"image built from {spec.build_context}"
            raise UserError(f"task '{spec.name}' needs its own container {what}; run it with --env docker")

    def open(self, spec: SandboxSpec) -> "LocalSandbox":
        self.check(spec)
        if self.root:
            self.root.mkdir(parents=True, exist_ok=True)
        workspace = Path(tempfile.mkdtemp(prefix="agentcompass-", dir=self.root))
        return LocalSandbox(spec, workspace, self.isolation, keep=self.keep)


class LocalSandbox:
    def __init__(self, spec: SandboxSpec, workspace: Path, isolation: str, keep: bool = False) -> None:
        self.spec = spec
        self.workspace = workspace
        self.isolation = isolation
        self.keep = keep
        self.fs = workspace / "fs"
        self._procs: set[subprocess.Popen[bytes]] = set()
        self._lock = threading.Lock()
        self._closed = False
        # New top-level folders appear only through upload; these exist from the start
        # because tasks write to them (Harbor's verifier and agent logs).
        for path in (spec.workdir, "/tmp", "/logs/verifier", "/logs/agent"):
            self.host_path(path).mkdir(parents=True, exist_ok=True)

    # -- paths ---------------------------------------------------------------------------
    def host_path(self, remote: str) -> Path:
        parts = Path(remote).parts
        if not remote.startswith("/") or ".." in parts:
            raise InfraError(f"sandbox paths must be absolute without '..': {remote!r}")
        if len(parts) < 2 or parts[1] in SYSTEM_DIRS:
            raise InfraError(f"the local provider cannot write to {remote!r}: it would shadow the host's /{parts[1] if len(parts) > 1 else ''}")
        return self.fs.joinpath(*parts[1:])

    def _rewrite(self, text: str) -> str:
        """Isolation none: point absolute sandbox paths at the workspace."""
        tops = sorted((p.name for p in self.fs.iterdir()), key=len, reverse=True)
        if not tops:
            return text
        pattern = re.compile(r"(?<![\w./-])/(" + "|".join(map(re.escape, tops)) + r")(?=/|\b|$)")
        return pattern.sub(lambda m: f"{self.fs}/{m.group(1)}", text)

    # -- exec ----------------------------------------------------------------------------
    def _env(self, env: dict[str, str] | None) -> dict[str, str]:
        home = "/tmp" if self.isolation == "bwrap" else str(self.host_path("/tmp"))
        base = {"PATH": SANDBOX_PATH, "HOME": home, "LANG": "C.UTF-8", "TERM": "dumb"}
        return {**base, **self.spec.env, **(env or {})}

    def _bwrap_argv(self, cwd: str) -> list[str]:
        argv = ["bwrap", "--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
        mine = {p.name for p in self.fs.iterdir()}
        for entry, args in host_root_binds():
            if entry not in mine:
                argv += args
        argv += ["--proc", "/proc", "--dev", "/dev"]
        for name in sorted(mine):
            argv += ["--bind", str(self.fs / name), f"/{name}"]
        if not self.spec.allow_internet:
            argv.append("--unshare-net")
        argv += ["--chdir", cwd, "--clearenv"]
        return argv

    def exec(
        self, cmd: str, *, cwd: str | None = None, env: dict[str, str] | None = None, timeout: float | None = None
    ) -> ExecResult:
        self._check_open()
        cwd = cwd or self.spec.workdir
        full_env = self._env(env)
        if self.isolation == "bwrap":
            argv = self._bwrap_argv(cwd)
            for key, value in full_env.items():
                argv += ["--setenv", key, value]
            argv += ["bash", "-c", cmd]
            host_cwd = None
        else:
            argv = ["bash", "-c", self._rewrite(cmd)]
            host_cwd = self.host_path(cwd)
        start = time.monotonic()
        try:
            proc = subprocess.Popen(
                argv, cwd=host_cwd, env=full_env, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
            )
        except OSError as exc:
            raise InfraError(f"cannot start command: {exc}") from exc
        with self._lock:
            self._procs.add(proc)
        timed_out = False
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            self._kill(proc)
            out, err = proc.communicate()
        finally:
            with self._lock:
                self._procs.discard(proc)
        code = proc.returncode if not timed_out else 124
        return ExecResult(code, cap_output(out), cap_output(err), timed_out, time.monotonic() - start)

    @staticmethod
    def _kill(proc: subprocess.Popen[bytes]) -> None:
        """Kill the whole process group: the command and everything it started."""
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    # -- files ---------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise InfraError("sandbox is closed")

    def upload(self, local: Path, remote: str) -> None:
        self._check_open()
        target = self.host_path(remote)
        try:
            if local.is_dir():
                shutil.copytree(local, target, dirs_exist_ok=True, symlinks=True)
                files = [p for p in target.rglob("*") if p.is_file()]
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(local, target)
                files = [target]
        except OSError as exc:
            raise InfraError(f"upload of {local} to {remote} failed: {exc}") from exc
        if self.isolation == "none":
            for path in files:
                self._rewrite_file(path)

    def _rewrite_file(self, path: Path) -> None:
        try:
            if path.stat().st_size > 1_000_000:
                return
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            return
        new = self._rewrite(text)
        if new != text:
            path.write_text(new, encoding="utf-8")

    def download(self, remote: str, local: Path) -> None:
        self._check_open()
        source = self.host_path(remote)
        if not source.exists():
            raise FileNotFoundError(remote)
        local.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, local, dirs_exist_ok=True, symlinks=True)
        else:
            shutil.copy2(source, local)

    def close(self) -> None:
        """Kill what runs and remove the workspace. Removal repeats on every call: a trial
        thread racing an interrupt may have written into the workspace after the first."""
        self._closed = True
        with self._lock:
            procs = list(self._procs)
        for proc in procs:
            self._kill(proc)
        if not self.keep:
            REMOVER.remove(self.workspace)
