"""The local provider: trials run on this machine, each in its own workspace.

Every sandbox path maps to `<workspace>/fs/<path>` (the task's workdir, /tests, /logs, ...).
With bubblewrap the sandbox sees those folders at their real paths, a private /tmp among them,
over an allowlist of the host read-only (its programs and libraries, a sanitized /etc, the Python
environment agentcompass runs from: agentcompass.providers.local.binds), and a network namespace
of its own, connected by pasta when the task allows internet (agentcompass.providers.local.network).
Without it (isolation `none`) commands are plain
subprocesses and absolute sandbox paths in commands and staged text files are rewritten to the
workspace, which is enough for well-behaved tasks and hides nothing.
"""

from __future__ import annotations

import dataclasses
import getpass
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Literal

from agentcompass.core.errors import InfraError, SandboxLost, UserError
from agentcompass.providers.local import network
from agentcompass.providers.local.kept import archive_workspace, restore_workspace
from agentcompass.providers.local.binds import (capability_args, etc_binds, python_binds, system_binds,
                                                visible_from_host)
from agentcompass.providers.local.procs import REAPER, Command, Finished
from agentcompass.providers.local.workspace import REMOVER
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
        online = spec.allow_internet or "public" in spec.network_modes
        if online and self.isolation == "bwrap" and not network.has_user_networking():
            raise UserError(f"task '{spec.name}': {network.MISSING}")

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
        self._forwarded_ports: set[int] = set()
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
        """The sandbox's view, built from the allowlist (agentcompass.providers.local.binds): system trees and
        a sanitized /etc read-only, the Python environment read-only, the workspace's folders writable, a
        network namespace of its own; the rest of the host is not there to read or connect to."""
        argv = ["bwrap", "--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net",
                *capability_args()]
        mine = {p.name for p in self.fs.iterdir()}
        for args in (*system_binds(), *etc_binds(self._resolv_conf())):
            argv += args
        argv += ["--proc", "/proc", "--dev", "/dev"]
        for name in sorted(mine):
            argv += ["--bind", str(self.fs / name), f"/{name}"]
        for args in python_binds():
            argv += args
        # What the user listed in `hide` (under one of the workspace's folders a path is the workspace's own).
        for path in self.hidden:
            if Path(path).parts[1] not in mine and visible_from_host(path):
                argv += ["--tmpfs", path] if os.path.isdir(path) else ["--ro-bind", "/dev/null", path]
        # The root itself (bwrap's tmpfs) read-only too: a write outside the workspace fails, as on the host.
        argv += ["--remount-ro", "/", "--chdir", cwd]
        return argv

    def _resolv_conf(self) -> str | None:
        """The sandbox's own resolv.conf when the host's names a resolver on its loopback (see network)."""
        dns = network.dns_forward() if self.spec.allow_internet else None
        if dns is None:
            return None
        path = self.workspace / "resolv.conf"  # beside fs/, so never visible as a sandbox path
        if not path.exists():
            path.write_text(dns.resolv_conf)
        return str(path)

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
        under a read-only bind changing): a wrapper writes one byte on a pipe before it execs the command, so
        that failure is told from the command's own exit 1 (stderr cannot tell it: the command may print anything).

        The environment is bwrap's own (it passes it on; no --setenv), so no key or value of it is in any
        process's arguments on the host. With internet, bwrap waits on a pipe until pasta has connected
        its network namespace, so the command never starts without its network."""
        argv = self._bwrap_argv(cwd)
        online = self.spec.allow_internet or bool(self._forwarded_ports)
        began_r, began_w = os.pipe()
        info_r, info_w = os.pipe() if online else (-1, -1)
        block_r, block_w = os.pipe() if online else (-1, -1)
        if online:
            argv += ["--info-fd", str(info_w), "--block-fd", str(block_r)]
        argv += ["bash", "-c", f'printf x >&{began_w}; exec {began_w}>&-; exec bash -c "$0"', cmd]
        mark = REAPER.new_mark() if online else ""
        daemon = None
        try:
            try:
                command = self._start(argv, env, pass_fds=tuple(fd for fd in (began_w, info_w, block_r) if fd >= 0))
            finally:
                for fd in (began_w, info_w, block_r):
                    if fd >= 0:
                        os.close(fd)
            if online:
                try:
                    daemon = self._connect(command, info_r, block_w, mark)
                finally:
                    os.close(info_r)
                    os.close(block_w)  # without a byte written (bwrap failed), bwrap goes on and ends
            done = self._finish(command, timeout)
            try:
                os.set_blocking(began_r, False)
                began = bool(os.read(began_r, 1))
            except BlockingIOError:
                began = False
        finally:
            os.close(began_r)
            if online:
                network.disconnect(daemon, mark)
        return done, began

    def _connect(self, command: Command, info_r: int, block_w: int, mark: str) -> int | None:
        """Connect the waiting sandbox's network namespace (pasta), then let its command start; pasta's pid."""
        try:
            child = network.read_child_pid(info_r, time.monotonic() + network.INFO_TIMEOUT_S)
            if child is None:
                return None  # bwrap ended before its sandbox existed: a set-up failure, tried again
            daemon = network.connect(child, tuple(sorted(self._forwarded_ports)), mark, internet=self.spec.allow_internet)
            try:
                os.write(block_w, b"x")
            except BrokenPipeError:
                pass  # bwrap already ended (its set-up failed): the command never began
            return daemon
        except BaseException:
            command.kill()
            self._finish(command, None)
            raise

    def _start(self, argv: list[str], env: dict[str, str], *, cwd: Path | None = None, mark: str | None = None,
               pass_fds: tuple[int, ...] = ()) -> Command:
        try:
            command = Command(argv, cwd=cwd, env=env, mark=mark, pass_fds=pass_fds)
        except OSError as exc:
            raise InfraError(f"cannot start command: {exc}") from exc
        with self._lock:
            self._commands.add(command)
        return command

    def _finish(self, command: Command, timeout: float | None) -> Finished:
        try:
            return command.wait(timeout, DEFAULT_OUTPUT_CAP)
        finally:
            with self._lock:
                self._commands.discard(command)

    def _run(self, argv: list[str], host_cwd: Path | None, env: dict[str, str], mark: str | None,
             timeout: float | None) -> Finished:
        return self._finish(self._start(argv, env, cwd=host_cwd, mark=mark), timeout)

    def forward_host_port(self, port: int) -> None:
        """Make the host's 127.0.0.1:port (the model gateway's) reachable at the same address inside the
        sandbox, and no other port of the host's loopback. Under isolation none the host's is the sandbox's."""
        self._forwarded_ports.add(int(port))

    def set_network(self, mode: str, allowed_hosts: tuple[str, ...] = ()) -> None:  # no allowlists here (refused)
        """A phase's network (Harbor's network_mode): the next commands' namespace is connected by pasta, or not."""
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

    def export_changes(self, dest: Path, cap_bytes: int) -> dict[str, int]:  # the workspace is all the agent wrote
        return archive_workspace(self.fs, dest, cap_bytes)

    def restore_changes(self, archive: Path) -> None:  # kept.py: nothing restored through a link or out of fs/
        restore_workspace(archive, self.fs)

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
