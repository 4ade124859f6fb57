"""A local sandbox's final state kept for regrading: its workspace (`fs/`, everything the agent could write: the
host's own folders are bound read-only) as a tar archive, and that archive put back into a fresh workspace.

The archive is read without following a link (tarfile stores links as links). Putting it back is where a forged
archive could reach the host, so every member is checked first: no absolute name or `..`, no device or fifo, a hard
link only to an earlier member, and Python's "tar" filter resolves each path on disk, so a member under a link the
archive made (`app/x -> /etc`, then `app/x/passwd`) is refused instead of written through it. Links themselves keep
their targets (a venv's `bin/python -> /usr/bin/python3` is honest work, and resolves in the sandbox, not here).
"""

from __future__ import annotations

import os
import stat
import tarfile
from pathlib import Path, PurePosixPath

from agentcompass.core.errors import InfraError


class RestoreRefused(InfraError):
    """A kept state that cannot be put back as it is (a forged archive): the same every try, so not retried."""

    retryable = False


class OverCap(Exception):
    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


def archive_workspace(root: Path, dest: Path, cap_bytes: int) -> dict[str, int]:
    """Tar `root`'s contents into `dest`; OverCap before writing when its files add up to more than `cap_bytes`."""
    size = files = 0
    for folder, dirs, names in os.walk(root):  # never into a linked folder
        for name in names:
            info = os.lstat(os.path.join(folder, name))
            if stat.S_ISREG(info.st_mode):
                size += info.st_size
            files += 1
    if size > cap_bytes:
        raise OverCap(size)
    with tarfile.open(dest, "w") as archive:
        for entry in sorted(os.listdir(root)):
            archive.add(os.path.join(root, entry), arcname=entry)  # links stored as links, never followed
    return {"bytes": size, "files": files, "deleted": 0}


def restore_workspace(archive: Path, root: Path) -> None:
    """Put `archive` back under `root` (a fresh workspace); RestoreRefused naming the first member refused."""
    seen: set[str] = set()

    def checked(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo:
        name = PurePosixPath(member.name)
        if name.is_absolute() or ".." in name.parts:
            raise RestoreRefused(f"the kept state names {member.name!r}, outside the workspace: not restored")
        if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
            raise RestoreRefused(f"the kept state holds {member.name!r}, neither file, folder nor link: not restored")
        if member.islnk() and member.linkname not in seen:
            raise RestoreRefused(f"the kept state hard-links {member.name!r} to {member.linkname!r}, no earlier member")
        seen.add(member.name)
        return tarfile.tar_filter(member, path)  # refuses a path that resolves outside `root` through a link

    try:
        with tarfile.open(archive, "r") as kept:
            kept.extractall(root, filter=checked)
    except (tarfile.TarError, OSError) as exc:
        raise RestoreRefused(f"cannot restore the kept state: {exc}") from exc
