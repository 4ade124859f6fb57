"""Pieces shared by providers whose sandboxes live elsewhere (docker, modal): they reach the
sandbox only through exec and archives, never through a shared filesystem."""

from __future__ import annotations

import shutil
import tarfile
import tempfile
from pathlib import Path, PurePosixPath
from typing import IO, Any

from agentcompass.errors import InfraError

EXEC_MARK = "AGENTCOMPASS_EXEC"  # env var that tags every process of one exec, so a timeout can find them all
# Run in the container on timeout: find every process carrying the exec's mark, stop them all at once
# (so none reacts to another's death) and kill them; repeat until none is left, which catches a
# process that forked during the scan.
KILL_MARKED = (
    'for pass in 1 2 3 4 5 6 7 8 9 10; do pids=; '
    'for d in /proc/[0-9]*; do '
    'tr "\\0" "\\n" < "$d/environ" 2>/dev/null | grep -qxF "$0" && pids="$pids ${d#/proc/}"; '
    'done; [ -z "$pids" ] && exit 0; kill -STOP $pids 2>/dev/null; kill -KILL $pids 2>/dev/null; done'
)
DRAIN_AFTER_KILL_S = 5.0  # how long to wait for the stream to end once the command was killed


def one_line(text: Any) -> str:
    return " ".join(str(text).split())


def root_owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """Uploaded files belong to the container's root, whoever owns them on the host."""
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def extract_renamed(archive: tarfile.TarFile, local: Path) -> None:
    """get_archive names entries after the remote's basename; put them at `local` instead."""
    members = archive.getmembers()
    if not members:
        return
    top = members[0].name.split("/")[0]
    local.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".agentcompass-download-", dir=local.parent))
    try:
        archive.extractall(staging, filter="data")
        source = staging / top
        if source.is_dir():
            shutil.copytree(source, local, dirs_exist_ok=True, symlinks=True)
        else:
            shutil.copy2(source, local)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def upload_archive(local: Path, remote: str, fileobj: IO[bytes]) -> None:
    """Write a tar of `local` into `fileobj` whose entries extract at `remote` under /, owned by root."""
    if not remote.startswith("/"):
        raise InfraError(f"sandbox paths must be absolute: {remote!r}")
    with tarfile.open(fileobj=fileobj, mode="w") as archive:
        archive.add(str(local), arcname=str(PurePosixPath(remote).relative_to("/")), filter=root_owned)
    fileobj.seek(0)
