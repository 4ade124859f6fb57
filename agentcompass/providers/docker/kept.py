"""A container's final state kept for regrading: what it changed since its image (changes.py's sources) as a tar
archive, deletions as overlay-style whiteouts, and that archive restored into a fresh container of the image.

The archive is the layer the agent added, never the image: a file `dir/.wh.NAME` (empty) says NAME was deleted,
`dir/.wh..wh..opq` that the folder's image content was removed and replaced (the OCI layer format's own spelling),
so `tar tvf` reads it as any image layer. Reading happens on the host (overlay2's upper dir, or the engine's
archive API over `docker diff`'s list): a process in the container cannot hide a change from it, and nothing in the
container runs to make it.

Restoring writes only through the engine's archive API, which resolves every path inside the container's own
root: a link the agent left (`/app/x -> /etc`) cannot take a write out of the fresh container.
"""

from __future__ import annotations

import os
import shlex
import stat
import tarfile
import tempfile
from pathlib import Path, PurePosixPath
from typing import IO, Any, Callable, Iterable

WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"
# Files the engine mounts into every container (and mounts again into the fresh one): never the agent's work.
ENGINE_FILES = frozenset({"/etc/hostname", "/etc/hosts", "/etc/resolv.conf", "/.dockerenv"})
SPOOL_BYTES = 16 * 1024 * 1024


class OverCap(Exception):
    """The changes are larger than the cap: nothing is kept (a partial state would grade as something else)."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


def archive_upper(upper: str, dest: Path, cap_bytes: int) -> dict[str, int]:
    """Tar overlay2's upper dir (what the container wrote) into `dest`; OverCap before writing when its
    regular files add up to more than `cap_bytes`."""
    listed: list[tuple[str, str, os.stat_result]] = []  # (host path, container path, lstat)
    opaque: list[str] = []
    size = 0
    for folder, dirs, files in os.walk(upper):  # os.walk never follows a link to a folder
        dirs.sort()
        rel_folder = "/" + os.path.relpath(folder, upper) if folder != upper else "/"
        if folder != upper and _is_opaque(folder):
            opaque.append(rel_folder)
        for name in sorted((*dirs, *files)):
            local = os.path.join(folder, name)
            path = os.path.join(rel_folder, name)
            try:
                info = os.lstat(local)
            except OSError:
                continue
            if path in ENGINE_FILES:
                continue
            listed.append((local, path, info))
            if stat.S_ISREG(info.st_mode):
                size += info.st_size
    if size > cap_bytes:
        raise OverCap(size)
    counts = {"files": 0, "deleted": 0}
    with tarfile.open(dest, "w") as archive:
        for folder in opaque:
            archive.addfile(_marker(f"{folder}/{OPAQUE}"))
        for local, path, info in listed:
            if stat.S_ISCHR(info.st_mode) and info.st_rdev == 0:  # overlay's whiteout: deleted since the image
                archive.addfile(_marker(_whiteout(path)))
                counts["deleted"] += 1
                continue
            archive.add(local, arcname=path.lstrip("/"), recursive=False)  # links stored as links, never followed
            counts["files"] += not stat.S_ISDIR(info.st_mode)
    return {"bytes": size, **counts}


def archive_listed(changes: list[tuple[str, str]], get_archive: Callable[[str], Iterable[bytes]], dest: Path,
                   cap_bytes: int) -> dict[str, int]:
    """The same archive from `docker diff`'s list (kind, path) and the engine's archive API, one path at a time
    (its own entry only: a folder's children are listed themselves); OverCap once the files pass `cap_bytes`."""
    size, counts = 0, {"files": 0, "deleted": 0}
    with tarfile.open(dest, "w") as archive:
        for kind, path in sorted(changes, key=lambda change: change[1]):
            if path in ENGINE_FILES:
                continue
            if kind == "D":
                archive.addfile(_marker(_whiteout(path)))
                counts["deleted"] += 1
                continue
            with tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES) as spool:
                for chunk in get_archive(path):
                    spool.write(chunk)
                spool.seek(0)
                with tarfile.open(fileobj=spool, mode="r") as single:
                    member = single.next()
                    if member is None:
                        continue
                    size += member.size if member.isfile() else 0
                    if size > cap_bytes:
                        raise OverCap(size)
                    member.name = path.lstrip("/")
                    archive.addfile(member, single.extractfile(member) if member.isfile() else None)
                    counts["files"] += not member.isdir()
    return {"bytes": size, **counts}


def split_archive(source: Path, spool: IO[bytes]) -> list[tuple[str, bool]]:
    """Copy `source` into `spool` without its whiteouts; return what they delete: (path, only the folder's
    contents) in archive order. Names with `..` or links into the archive are the engine's to resolve (in the
    container's root), never this host's."""
    deletions: list[tuple[str, bool]] = []
    with tarfile.open(source, "r") as archive, tarfile.open(fileobj=spool, mode="w") as kept:
        for member in archive:
            name = PurePosixPath("/" + member.name.lstrip("/"))
            if name.name == OPAQUE:
                deletions.append((str(name.parent), True))
            elif name.name.startswith(WHITEOUT):
                deletions.append((str(name.parent / name.name[len(WHITEOUT):]), False))
            else:
                kept.addfile(member, archive.extractfile(member) if member.isfile() else None)
    spool.seek(0)
    return deletions


def deletion_command(deletions: list[tuple[str, bool]]) -> str:
    """Shell (run as root in the fresh container) that deletes what the agent deleted; `rm` never follows a link
    it removes, and the fresh container holds none of the agent's yet."""
    steps = []
    for path, contents_only in deletions:
        if not PurePosixPath(path).is_absolute() or ".." in PurePosixPath(path).parts or path == "/":
            continue
        q = shlex.quote(path)
        steps.append(f"find {q} -mindepth 1 -maxdepth 1 -exec rm -rf -- {{}} + 2>/dev/null" if contents_only
                     else f"rm -rf -- {q}")
    return "; ".join(steps + ["true"])


def _marker(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name.lstrip("/"))
    info.mode = 0o600
    return info


def _whiteout(path: str) -> str:
    parent, name = os.path.split(path)
    return os.path.join(parent, WHITEOUT + name)


def _is_opaque(folder: str) -> bool:
    """overlay's mark of a folder whose lower content is hidden (trusted.*; user.* on a userxattr mount)."""
    for name in ("trusted.overlay.opaque", "user.overlay.opaque"):
        try:
            if os.getxattr(folder, name, follow_symlinks=False) == b"y":
                return True
        except OSError:
            continue
    return False

