"""The local provider: trials run on this machine, each in its own workspace.

Every sandbox path maps to `<workspace>/fs/<path>` (the task's workdir, /tests, /logs, ...).
With bubblewrap the sandbox sees those folders at their real paths over a read-only host
root, with a private /tmp, the home directories (and any path listed in `hide`) behind empty
folders, and no network unless the task allows it; the Python environment agentcompass runs
from stays visible read-only wherever it lives. Without it (isolation `none`) commands are plain
subprocesses and absolute sandbox paths in commands and staged text files are rewritten to the
workspace, which is enough for well-behaved tasks and hides nothing.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import getpass
import os
import queue
import re
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Literal

import structlog

from agentcompass.core.errors import InfraError, SandboxLost, UserError
from agentcompass.providers.local.procs import REAPER, Command, Finished
from agentcompass.providers.remote import EXEC_MARK
from agentcompass.core.readiness import local_readiness
from agentcompass.core.safe_files import copy_tree
from agentcompass.core.sandbox import (DEFAULT_OUTPUT_CAP, ExecResult, SandboxSpec, cap_output, common_refusals,
                                  compose_refusal, refusal, uncapped_storage)
from agentcompass.core.schema import Strict

# Host folders a sandbox may never shadow: they hold the tools the commands run with.
SYSTEM_DIRS = {"bin", "boot", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "run", "sbin", "sys", "usr", "var"}
BWRAP_SETUP_TRIES = 5  # set-ups of one command tried before bubblewrap's failure is an infra error
SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_notice_lock = threading.Lock()
_notice_shown = False
log = structlog.get_logger("agentcompass")


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
            try:
                self._remove(path)
            finally:
                self._queue.task_done()

    @staticmethod
    def _remove(path: Path) -> None:
        failures: list[tuple[str, BaseException]] = []

        def record(function: object, failed: str, exc_info: tuple) -> None:
            if not isinstance(exc_info[1], FileNotFoundError):  # already gone (a second close) is the goal
                failures.append((failed, exc_info[1]))

        shutil.rmtree(path, onerror=record)
        if failures:
            failed, error = failures[0]
            log.warning("cannot remove a closed workspace; delete it by hand", path=str(path), failed=failed,
                        error=str(error), failures=len(failures))

    def drain(self) -> None:
        self._queue.join()


REMOVER = WorkspaceRemover()
os.register_at_fork(after_in_child=REMOVER.__init__)  # a worker process (agentcompass.core.shards) starts its own thread


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


@functools.lru_cache(maxsize=1)
def python_environment() -> tuple[str, ...]:
    """Where the running interpreter and its packages live (a venv and the install it was made
    from): commands a user points at this Python must find it inside the sandbox."""
    places = {sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix,
              str(Path(os.path.realpath(sys.executable)).parents[1])}
    return tuple(sorted({os.path.abspath(p) for p in places} | {os.path.realpath(p) for p in places}))


def hidden_paths(listed: list[str]) -> tuple[str, ...]:
    """The home directories and the user's own list, as absolute paths that exist on this host."""
    paths = []
    for entry in [os.path.expanduser("~"), "/root", *listed]:
        path = os.path.expanduser(entry)
        if not os.path.isabs(path):
            raise UserError(f"environments.local.hide: {entry!r} is not an absolute path; list paths like /srv/secrets or ~/.netrc")
        if os.path.normpath(path) == "/":
            raise UserError("environments.local.hide: '/' would hide the whole host; list the folders or files to hide")
        paths += [os.path.abspath(path), os.path.realpath(path)]
    return tuple(sorted({p for p in paths if os.path.lexists(p)}))


def own_user_names() -> set[str]:
    """The names a task may give for the user agentcompass runs as: its name and uid (root also as 0)."""
    return {getpass.getuser(), str(os.getuid())}


def is_under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


class LocalProvider:
    name = "local"
    readiness = staticmethod(local_readiness)  # `env check local`
    fork_safe = True  # plain data and child processes: trials may run in forked workers (agentcompass.core.shards)

    class Settings(Strict):
        isolation: Literal["auto", "bwrap", "none"] = "auto"
        root: str | None = None
        hide: list[str] = []

    def __init__(self, isolation: str = "auto", root: str | None = None, hide: list[str] | None = None,
                 keep: bool = False, **_: object) -> None:
        self.requested_isolation = isolation
        self.isolation = self._pick_isolation(isolation)
        if hide and self.isolation == "none":
            raise UserError("environments.local.hide needs isolation 'bwrap' (isolation 'none' hides nothing); "
                            "install bubblewrap (apt-get install bubblewrap) or use --env docker")
        self.hidden = hidden_paths(hide or []) if self.isolation == "bwrap" else ()
        self.root = Path(root) if root else None
        self.keep = keep

    @staticmethod
    def _pick_isolation(isolation: str) -> str:
        has_bwrap = shutil.which("bwrap") is not None
        if isolation == "bwrap" and not has_bwrap:
            raise UserError("isolation 'bwrap' needs bubblewrap; install it (apt-get install bubblewrap) or pass --env-params '{\"isolation\": \"none\"}'")
        if isolation != "auto":
            return isolation
        return "bwrap" if has_bwrap else "none"

    def check_harness(self, harness_cls: type, harness_name: str) -> None:
        """Without bubblewrap, `auto` means plain subprocesses with the user's full rights: fine for the oracle
        and nop, which run the task's own scripts, not for the commands a model chooses. Those need the fence,
        another env, or `isolation: none` said out loud."""
        global _notice_shown
        if self.isolation != "none" or self.requested_isolation != "auto":
            return
        if getattr(harness_cls, "needs_model", False):
            raise UserError(f"harness '{harness_name}' would run a model's commands on this machine unfenced: bubblewrap "
                            f"is not installed; apt-get install bubblewrap, or use --env docker, or pass "
                            f"--env-params '{{\"isolation\": \"none\"}}' to run them as plain subprocesses with your rights")
        with _notice_lock:
            if not _notice_shown:
                print("notice: bubblewrap (bwrap) is not installed; local trials run as plain subprocesses", file=sys.stderr)
                _notice_shown = True

    def check(self, spec: SandboxSpec) -> None:
        compose_refusal(spec, "local")  # before the image: the sidecars are what no host run can give
        if spec.needs_image:
            what = f"image '{spec.image}'" if spec.image else f"image built from {spec.build_context}"
            raise UserError(f"task '{spec.name}' needs its own container {what}; run it with --env docker, or, when the "
                            f"host's own tools are all it needs, set `runs_on_host: true` in its recipe (recipes/demo.yaml "
                            f"does, with `build_args` BASE_IMAGE for its Dockerfiles on docker and modal)")
        for field_name, user in spec.users.items():
            if user not in own_user_names():  # every command runs as the user running agentcompass
                raise refusal(spec, "local", f'{field_name} = "{user}"', f"commands run as {getpass.getuser()}")
        # bwrap starts each command in a network namespace of its own: phases can differ; plain subprocesses cannot.
        common_refusals(spec, "local", switch_network=self.isolation == "bwrap")
        uncapped_storage(spec, "local", "a host directory has no size")
        if "no-network" in spec.network_modes and self.isolation != "bwrap":
            raise refusal(spec, "local", 'network_mode = "no-network"', "isolation 'none' cannot cut the network")

    def open(self, spec: SandboxSpec) -> "LocalSandbox":
        self.check(spec)
        if self.root:
            self.root.mkdir(parents=True, exist_ok=True)
        workspace = Path(tempfile.mkdtemp(prefix="agentcompass-", dir=self.root))
        return LocalSandbox(spec, workspace, self.isolation, keep=self.keep, hidden=self.hidden)


class LocalSandbox:
    def __init__(self, spec: SandboxSpec, workspace: Path, isolation: str, keep: bool = False,
                 hidden: tuple[str, ...] = ()) -> None:
        self.spec = spec
        self.workspace = workspace
        self.isolation = isolation
        self.keep = keep
        self.hidden = hidden
        self.fs = workspace / "fs"
        self._commands: set[Command] = set()
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
        # Under one of the workspace's folders a path is the workspace's own (and /tmp is private).
        for path in self.hidden:
            if Path(path).parts[1] not in mine:
                argv += ["--tmpfs", path] if os.path.isdir(path) else ["--ro-bind", "/dev/null", path]
        for name in sorted(mine):
            argv += ["--bind", str(self.fs / name), f"/{name}"]
        for path in python_environment():
            top = Path(path).parts[1] if path != "/" else ""
            if top == "tmp" or (top not in mine and any(is_under(path, hidden) for hidden in self.hidden)):
                argv += ["--ro-bind", path, path]
        if not self.spec.allow_internet:
            argv.append("--unshare-net")
        argv += ["--chdir", cwd, "--clearenv"]
        return argv

    def exec(
        self, cmd: str, *, cwd: str | None = None, env: dict[str, str] | None = None, timeout: float | None = None,
        user: str | None = None,
    ) -> ExecResult:
        self._check_open()
        cwd = cwd or self.spec.workdir
        full_env = self._env(env)
        start = time.monotonic()
        if self.isolation == "bwrap":
            for _ in range(BWRAP_SETUP_TRIES):
                done, began = self._run_in_bwrap(cmd, cwd, full_env, timeout)
                if began or done.timed_out or self._closed:
                    break
                time.sleep(0.2)  # bwrap could not set the sandbox up, so the command never ran: try again
            else:
                raise InfraError(f"bubblewrap could not set the sandbox up: {done.stderr.decode(errors='replace').strip()[-300:]}")
        else:
            full_env[EXEC_MARK] = mark = REAPER.new_mark()
            done = self._run(["bash", "-c", self._rewrite(cmd)], self.host_path(cwd), full_env, mark, timeout)
        self._check_lost(done.code, done.killed_by_us)
        code = 124 if done.timed_out else done.code
        return ExecResult(code, cap_output(done.stdout), cap_output(done.stderr), done.timed_out, time.monotonic() - start)

    def _run_in_bwrap(self, cmd: str, cwd: str, env: dict[str, str], timeout: float | None) -> tuple[Finished, bool]:
        """Run cmd under bubblewrap; also whether it began. bwrap can fail to set the sandbox up (a host mount
        under a read-only bind changing, such as a docker container's under /var): a wrapper writes one byte
        on a pipe before it execs the command, so that failure is told from the command's own exit 1
        (stderr cannot tell it: the command may print anything)."""
        began_r, began_w = os.pipe()
        argv = self._bwrap_argv(cwd)
        for key, value in env.items():
            argv += ["--setenv", key, value]
        argv += ["bash", "-c", f'printf x >&{began_w}; exec {began_w}>&-; exec bash -c "$0"', cmd]
        try:
            done = self._run(argv, None, env, None, timeout, pass_fds=(began_w,))
        finally:
            os.close(began_w)
        try:
            os.set_blocking(began_r, False)
            began = bool(os.read(began_r, 1))
        except BlockingIOError:
            began = False
        finally:
            os.close(began_r)
        return done, began

    def _run(self, argv: list[str], host_cwd: Path | None, env: dict[str, str], mark: str | None,
             timeout: float | None, pass_fds: tuple[int, ...] = ()) -> Finished:
        try:
            command = Command(argv, cwd=host_cwd, env=env, mark=mark, pass_fds=pass_fds)
        except OSError as exc:
            raise InfraError(f"cannot start command: {exc}") from exc
        with self._lock:
            self._commands.add(command)
        try:
            return command.wait(timeout, DEFAULT_OUTPUT_CAP)
        finally:
            with self._lock:
                self._commands.discard(command)

    def set_network(self, mode: str, allowed_hosts: tuple[str, ...] = ()) -> None:  # no allowlists here (refused)
        """A phase's network (Harbor's network_mode): the next commands' bwrap shares the host's or has none."""
        self.spec = dataclasses.replace(self.spec, allow_internet=mode == "public")

    def _check_lost(self, code: int, killed_by_us: bool) -> None:
        """Only what cannot be the command's own doing: its workspace is gone, or bwrap itself
        (which a command inside cannot signal) died of a signal we did not send."""
        if self._closed:
            return  # closed under it (an interrupt): the trial is ending anyway
        if not self.fs.is_dir():
            raise SandboxLost(f"the sandbox's workspace {self.workspace} vanished")
        if self.isolation == "bwrap" and code < 0 and not killed_by_us:
            raise SandboxLost(f"the sandbox was killed from outside (bwrap ended by signal {-code})")

    # -- files ---------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise InfraError("sandbox is closed")
        if not self.fs.is_dir():
            raise SandboxLost(f"the sandbox's workspace {self.workspace} vanished")

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

    def download(self, remote: str, local: Path) -> list[str]:
        """A host copy of the workspace's `remote` that follows no link the agent made (core/safe_files.py);
        what was refused is returned. FileNotFoundError when nothing is there."""
        self._check_open()
        source = self.host_path(remote)
        if not os.path.lexists(source):
            raise FileNotFoundError(remote)
        return copy_tree(source, local, remote, self.fs)

    def close(self) -> None:
        """Kill what runs and remove the workspace. Removal repeats on every call: a trial
        thread racing an interrupt may have written into the workspace after the first."""
        self._closed = True
        with self._lock:
            commands = list(self._commands)
        for command in commands:
            command.kill()
        if not self.keep:
            REMOVER.remove(self.workspace)
