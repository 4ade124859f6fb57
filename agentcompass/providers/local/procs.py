"""One local command and every process it starts: a deadline that holds however they detach,
output capped while it is read, and nothing left running when the command or the runner ends.

Every process of a command carries a mark in its environment (EXEC_MARK=<runner>-<n>), which a
daemon keeps through `setsid`, double forks and closed pipes; a scan of /proc finds them. A small
reaper process, one per runner, does the same scan for every mark of its runner when the runner
dies, even by SIGKILL. Under bubblewrap the pid namespace does all this by itself.
"""

from __future__ import annotations

import atexit
import itertools
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from agentcompass.core.cores import EveryCore
from agentcompass.providers.remote import EXEC_MARK

READ_CHUNK = 1 << 16
POLL_S = 0.05  # how often to look for the command's end when pidfd_open is unavailable
DRAIN_AFTER_END_S = 0.5  # output still arriving once the command ended and its processes are killed
KILL_PASSES = 10  # a process may fork while we scan; repeat until a scan finds none


@dataclass
class Finished:
    code: int
    stdout: bytes  # at most cap + 1 bytes: one more than kept tells the caller it was cut
    stderr: bytes
    timed_out: bool
    killed_by_us: bool  # by the timeout or by kill(): a signal death we caused, not a lost sandbox


PF_KTHREAD = 0x00200000  # /proc/<pid>/stat's flags: a kernel thread, which never has an environment
# A process whose environment reads empty may be one of ours caught in execve (the kernel shows no
# environment between the old image's end and the new one's arguments) or on its way out: scan again
# for this long before calling it someone else's.
UNSURE_RESCAN_S = 2.0


def boot_ticks() -> int:
    """Now, in the clock ticks since boot that /proc/<pid>/stat's start time counts."""
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * os.sysconf("SC_CLK_TCK"))


def _started_since_unmarked(pid: str, since_ticks: int) -> bool:
    """A user process started at or after since_ticks, alive, whose environment read empty."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ", which may hold spaces
    state, flags, start = fields[0], int(fields[6]), int(fields[19])
    return state not in "ZX" and not flags & PF_KTHREAD and start >= since_ticks


def marked_pids(value: str, prefix: bool = False, since_ticks: int | None = None) -> tuple[list[int], bool]:
    """Processes whose environment holds EXEC_MARK=value (or a value starting with it), and whether a
    process started since since_ticks showed no environment at all (it may be a marked one mid-exec)."""
    needle = f"\0{EXEC_MARK}={value}".encode() + (b"" if prefix else b"\0")
    found, unsure = [], False
    for entry in os.scandir("/proc") if os.path.isdir("/proc") else ():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                environ = b"\0" + f.read()
        except OSError:
            continue
        if needle in environ:
            found.append(int(entry.name))
        elif environ == b"\0" and since_ticks is not None and not unsure:
            unsure = _started_since_unmarked(entry.name, since_ticks)
    return found, unsure


def kill_marked(value: str, prefix: bool = False, since_ticks: int | None = None) -> None:
    """Stop every marked process at once (so none reacts to another's death), then kill them; repeat
    until a scan finds none and no process started since since_ticks could be a marked one mid-exec."""
    passes = 0
    unsure_until = time.monotonic() + UNSURE_RESCAN_S
    while True:
        pids, unsure = marked_pids(value, prefix, since_ticks)
        if not pids:
            if not unsure or time.monotonic() >= unsure_until:
                return
            time.sleep(0.005)
            continue
        passes += 1
        if passes > KILL_PASSES:
            return
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass


class Reaper:
    """A process outside the runner's session that kills every marked process of this runner
    once the runner is gone: it waits for EOF on a pipe only the runner holds."""

    def __init__(self) -> None:
        self.token = uuid.uuid4().hex[:12]
        self._counter = itertools.count(1)
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None

    def new_mark(self) -> str:
        with self._lock:
            if self._proc is None:
                package_parent = str(Path(__file__).resolve().parents[3])
                env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_parent, os.environ.get("PYTHONPATH")]))}
                self._proc = subprocess.Popen(
                    [sys.executable, "-m", "agentcompass.providers.local.procs", self.token],
                    stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env, start_new_session=True,
                )
                atexit.register(self.stop)
            return f"{self.token}-{next(self._counter)}"

    def stop(self) -> None:
        if self._proc is not None and self._proc.stdin is not None:
            self._proc.stdin.close()


REAPER = Reaper()
# A forked worker process (agentcompass.core.shards) gets its own token and reaper: when it ends, its
# reaper kills its commands' processes, never those of the workers still running.
os.register_at_fork(after_in_child=REAPER.__init__)


def reap_when_runner_ends(token: str) -> None:
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)  # a Ctrl-C aimed at the runner must not end the guard
    started = boot_ticks() - 1
    sys.stdin.buffer.read()
    kill_marked(f"{token}-", prefix=True, since_ticks=started)


class Command:
    """A started command: `wait` enforces its deadline and ends everything it started."""

    def __init__(self, argv: list[str], *, cwd: Path | None, env: dict[str, str], mark: str | None,
                 pass_fds: tuple[int, ...] = ()) -> None:
        self.mark = mark
        self.killed_by_us = False
        self.started_ticks = boot_ticks() - 1  # a tick early: the kernel rounds the children's start down
        with EveryCore():  # a worker process keeps to one core; a task's commands get all of them
            self.proc = subprocess.Popen(
                argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, pass_fds=pass_fds,
            )

    def kill(self) -> None:
        """The process group, then every marked process however it detached."""
        self.killed_by_us = True
        self._kill_all()

    def _kill_all(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        if self.mark:
            kill_marked(self.mark, since_ticks=self.started_ticks)

    def _ended(self) -> bool:
        """Has the main process exited? Asked without reaping it, so its pid (and with it the
        process group id we kill) cannot be reused until we are done."""
        if self.proc.returncode is not None:
            return True
        if not hasattr(os, "waitid"):  # macOS
            return self.proc.poll() is not None
        try:
            return os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:
            return True

    def wait(self, timeout: float | None, cap: int) -> Finished:
        deadline = None if timeout is None else time.monotonic() + timeout
        assert self.proc.stdout is not None and self.proc.stderr is not None
        kept = {self.proc.stdout.fileno(): bytearray(), self.proc.stderr.fileno(): bytearray()}
        selector = selectors.DefaultSelector()
        for stream in (self.proc.stdout, self.proc.stderr):
            selector.register(stream, selectors.EVENT_READ)
        pidfd = _pidfd(self.proc.pid)
        if pidfd is not None:
            selector.register(pidfd, selectors.EVENT_READ)
        timed_out = False
        drain_until: float | None = None  # set once the command ended (or was killed) and its processes too
        try:
            while True:
                now = time.monotonic()
                if drain_until is None and (self._ended() or (deadline is not None and now >= deadline)):
                    timed_out = not self._ended()
                    if timed_out:
                        self.kill()
                    else:
                        self._kill_all()  # whatever it left behind ends with it
                    now = time.monotonic()  # the kill may have taken a while: drain from its end
                    drain_until = now + DRAIN_AFTER_END_S
                reading = any(key.fd in kept for key in selector.get_map().values())
                # Past drain_until, a process we could not find holds the pipes: stop listening to it.
                if drain_until is not None and (not reading or now >= drain_until):
                    break
                limit = drain_until if drain_until is not None else deadline
                limits = [] if limit is None else [limit - now]
                if pidfd is None:
                    limits.append(POLL_S)
                for key, _ in selector.select(max(0.0, min(limits)) if limits else None):
                    if key.fd not in kept:
                        selector.unregister(key.fd)  # the pidfd: the command ended
                        continue
                    chunk = os.read(key.fd, READ_CHUNK)
                    if not chunk:
                        selector.unregister(key.fd)
                    elif len(kept[key.fd]) <= cap:
                        kept[key.fd] += chunk[: cap + 1 - len(kept[key.fd])]
            code = self.proc.wait()
        finally:
            selector.close()
            if pidfd is not None:
                os.close(pidfd)
            self.proc.stdout.close()
            self.proc.stderr.close()
        out, err = kept.values()
        return Finished(code, bytes(out), bytes(err), timed_out, self.killed_by_us)


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


if __name__ == "__main__":
    reap_when_runner_ends(sys.argv[1])
