"""Pieces shared by providers whose sandboxes live elsewhere (docker, modal): they reach the
sandbox only through exec and archives, never through a shared filesystem."""

from __future__ import annotations

import os
import re
import socket
import tarfile
import threading
import time
from pathlib import Path, PurePosixPath
from typing import IO, Any, Callable

from agentcompass.core.errors import InfraError, SandboxLost
from agentcompass.core.safe_files import extract_tree
from agentcompass.core.sandbox import SandboxSpec

EXEC_MARK = "AGENTCOMPASS_EXEC"  # env var that tags every process of one exec, so a timeout can find them all
# Run in the container on timeout: find every process carrying the exec's mark, stop them all at once
# (so none reacts to another's death) and kill them; repeat until none is left, which catches a
# process that forked during the scan. A live process whose environment reads empty may be a marked one
# caught in execve (the kernel shows no environment until the new image's arguments are set up): while
# one is seen (kernel threads and zombies aside), scan again, for up to 40 passes.
KILL_MARKED = (
    'n=0; while [ $n -lt 40 ]; do n=$((n+1)); pids=; unsure=; '
    'for d in /proc/[0-9]*; do '
    'e=$(tr "\\0" "\\n" 2>/dev/null < "$d/environ") || continue; '
    'if printf "%s\\n" "$e" | grep -qxF "$0"; then pids="$pids ${d#/proc/}"; '
    'elif [ -z "$e" ] && [ "${d#/proc/}" != 2 ] && ! grep -qE "^(State:.[ZX]|PPid:.2$)" "$d/status" 2>/dev/null; '
    'then unsure=1; fi; done; '
    'if [ -n "$pids" ]; then kill -STOP $pids 2>/dev/null; kill -KILL $pids 2>/dev/null; '
    'elif [ -z "$unsure" ]; then exit 0; else sleep 0.05 2>/dev/null || sleep 1; fi; done'
)
DRAIN_AFTER_KILL_S = 5.0  # how long to wait for the stream to end once the command was killed
# A command ending with one of these (or -1) may have died with its sandbox: the provider then asks
# whether the sandbox still runs before anyone reads the exit code as the agent's or the tests' verdict.
# 125-127: the runtime could not start it; 128+n: killed by signal n, up to SIGKILL (137).
SUSPECT_EXIT_CODES = range(125, 138)
NOT_FOUND_EXIT = 127  # an agent's everyday "command not found": checked once, never waited on
SETTLE_S = 1.0  # an engine may record a command's death this long before its sandbox's
OWNER_LABEL = "agentcompass.owner"  # who opened a sandbox: host/pid/process start/provider instance


MISSING_EXIT = 44  # the download script's exit code for a path that does not exist
# A download as tar over exec (modal, gcp): $1 tarred from its parent directory, so the archive's top
# entry is its basename.
DOWNLOAD_SCRIPT = f'test -e "$1" || exit {MISSING_EXIT}; cd "$(dirname "$1")" && exec tar -cf - "$(basename "$1")"'


class RemoteSandbox:
    """What docker's and modal's sandboxes share: the trial's spec, closing once, and telling a lost
    sandbox (SandboxLost: retried, whatever the phase) from a failed call (InfraError) by asking the
    provider's `_lost()` before anyone reads a command's result as the agent's or the tests' verdict."""

    def __init__(self, spec: SandboxSpec, settings: Any, has_task_image: bool = True) -> None:
        self.spec = spec
        self.settings = settings
        # The Dockerfile (or the task's own image) already put the task's files in place.
        self.has_task_image = has_task_image
        self._closed = False
        self._close_lock = threading.Lock()

    def _lost(self) -> str | None:
        """None while the sandbox runs; else what became of it. Provider-specific."""
        return None

    def _check_exit(self, code: int, broken: bool = False) -> None:
        """After a command whose stream broke or whose exit code is suspect (or -1): SandboxLost when
        the sandbox no longer runs. A kill (137), a failed start (126), ... is re-checked for a moment,
        as the engine may not have recorded the sandbox's death yet; a sandbox still running leaves
        the exit code to the command's caller."""
        if not (broken or code < 0 or code in SUSPECT_EXIT_CODES):
            return
        quick = not broken and (code < 0 or code == NOT_FOUND_EXIT)
        self._raise_if_lost(0.0 if quick else SETTLE_S)

    def _raise_if_lost(self, settle_s: float = 0.0) -> None:
        """SandboxLost when the sandbox no longer runs (checked again for `settle_s` while it still does)."""
        deadline = time.monotonic() + settle_s
        while True:
            lost = self._lost()
            if lost:
                raise SandboxLost(f"sandbox lost: {lost}")
            if time.monotonic() >= deadline:
                return
            time.sleep(0.1)

    def _failure(self, what: str, exc: Exception | None = None) -> InfraError:
        """The error for a failed call: SandboxLost when the sandbox is gone, else InfraError."""
        lost = self._lost()
        if lost:
            return SandboxLost(f"{what}: sandbox lost: {lost}")
        return InfraError(f"{what}: {one_line(getattr(exc, 'explanation', None) or exc)[:300]}")

    def _close_once(self) -> bool:
        """True for the first caller only: close is idempotent and may race an interrupt."""
        with self._close_lock:
            first, self._closed = not self._closed, True
        return first


def upload_archive(local: Path, remote: str, fileobj: IO[bytes]) -> None:
    """Write a tar of `local` into `fileobj` whose entries extract at `remote` under /, owned by root."""
    if not remote.startswith("/"):
        raise InfraError(f"sandbox paths must be absolute: {remote!r}")
    with tarfile.open(fileobj=fileobj, mode="w") as archive:
        archive.add(str(local), arcname=str(PurePosixPath(remote).relative_to("/")), filter=root_owned)
    fileobj.seek(0)


def is_leftover(labels: dict[str, str], running: bool, trial_labels: dict[str, str], owner: str) -> bool:
    """Whether a sandbox holding a trial's name is that very trial's leftover, safe to remove: same run and
    trial labels, opened by `owner` (this provider) or by a process of this host that has ended; without an
    owner label (an older version) only when it no longer runs. A live sibling's sandbox is never one."""
    if labels.get("agentcompass") != "1" or any(labels.get(k) != trial_labels.get(k) for k in ("run", "trial")):
        return False
    holder = labels.get(OWNER_LABEL)
    return (holder == owner or owner_is_gone(holder)) if holder else not running


def process_owner(instance: str, pid: int | None = None, sep: str = "/") -> str:
    """A process as `host/pid/start/instance`: a pid alone is reused, its start time (since boot) is not.
    `sep` "_" gives a value in Modal's tag alphabet ([a-zA-Z0-9._-], at most 63: the host is cut to 30)."""
    pid = pid or os.getpid()
    try:  # field 22 of /proc/PID/stat, counted after the parenthesised command name
        start = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        start = "gone"
    host = socket.gethostname() if sep == "/" else re.sub(r"[^A-Za-z0-9.-]", "-", socket.gethostname())[:30]
    return sep.join([host, str(pid), start, instance])


def owner_is_gone(owner: str) -> bool:
    """True only when sure: the owner ran on this host and that process has ended."""
    sep = "/" if "/" in owner else "_"
    host, pid, start, instance = (owner.split(sep) + ["", "", ""])[:4]
    if host != process_owner("", sep=sep).split(sep)[0] or not pid.isdigit():
        return False
    return process_owner(instance, int(pid), sep) != owner


def taken_with_the_headers(sock: Any) -> bytes:
    """The start of the stream that the HTTP client's buffered reader took in with the response headers.
    docker-py hands over the raw socket beneath that reader (docker/docker-py#3332), so a command that
    writes and ends at once would otherwise lose what it wrote (seen: a failed `git apply` with no message)."""
    response = getattr(sock, "_response", None)
    reader = getattr(getattr(getattr(response, "raw", None), "_fp", None), "fp", None)
    if reader is None or not hasattr(reader, "read1"):
        return b""
    raw = getattr(sock, "_sock", sock)
    raw.setblocking(False)  # what the reader holds, and nothing that has not arrived yet
    try:
        return reader.read1(1 << 16) or b""
    except (OSError, ValueError):  # nothing held: a plain socket says EAGAIN, a TLS one SSLWantReadError
        return b""
    finally:
        raw.setblocking(True)


def read_frames(sock: Any, deadline: float | None, keep: int,
                on_deadline: Callable[[], None]) -> tuple[bytes, bytes, bool, bool]:
    """Read Docker's multiplexed stdout/stderr frames until the command ends or the deadline passes
    (then `on_deadline` kills it and what it wrote is drained). Keeps `keep` bytes per stream.
    Returns (stdout, stderr, timed_out, broken): broken when the engine dropped the stream."""
    raw = getattr(sock, "_sock", sock)
    streams = {1: bytearray(), 2: bytearray()}
    pending = bytearray(taken_with_the_headers(sock))
    timed_out = broken = False

    def take_frames() -> None:
        for kind, payload in split_frames(pending):
            buffer = streams.get(kind)
            if buffer is not None and len(buffer) < keep:
                buffer += payload[: keep - len(buffer)]

    try:
        take_frames()
        while True:
            limit = None if deadline is None else deadline - time.monotonic()
            if limit is not None and limit <= 0:
                if timed_out:
                    break  # killed, yet something still holds the stream open: stop waiting
                timed_out = True
                on_deadline()
                deadline = time.monotonic() + DRAIN_AFTER_KILL_S
                continue
            raw.settimeout(limit)
            try:
                data = raw.recv(65536)
            except socket.timeout:
                continue
            if not data:
                break
            pending += data
            take_frames()
    except OSError:
        broken = True  # the engine dropped the stream (container removed): return what arrived
    finally:
        try:
            sock.close()
        except OSError:
            pass
    return bytes(streams[1]), bytes(streams[2]), timed_out, broken


def split_frames(pending: bytearray) -> list[tuple[int, bytes]]:
    """Take the complete frames off the front of Docker's multiplexed stream.

    Each frame is an 8-byte header (stream id: 1 stdout, 2 stderr; 3 zero bytes; 4-byte size)
    followed by its payload; an incomplete frame stays in `pending` for the next read.
    """
    out: list[tuple[int, bytes]] = []
    while len(pending) >= 8:
        size = int.from_bytes(pending[4:8], "big")
        if len(pending) < 8 + size:
            break
        out.append((pending[0], bytes(pending[8 : 8 + size])))
        del pending[: 8 + size]
    return out


def one_line(text: Any) -> str:
    return " ".join(str(text).split())


def root_owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """Uploaded files belong to the container's root, whoever owns them on the host."""
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def extract_renamed(archive: tarfile.TarFile, local: Path, remote: str) -> list[str]:
    """get_archive names entries after the remote's basename; put them at `local` instead, by the safe
    extractor's rules (core/safe_files.py): what it refused (links out of the tree, ...) is returned."""
    return extract_tree(archive, local, remote)
