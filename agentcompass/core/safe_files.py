"""Host-side copies of what an agent could have written: nothing is followed out of the copied tree.

An agent writes its sandbox's /logs, artifacts and scratch files; the runner copies some of them to the
host (downloads) and the viewer reads them. A link the agent made there must never make the host read
or write anything else: `/logs/artifacts/x -> /root/secret` copied by a host process that follows links
copies the host's secret into the results. So every host-side copy goes through a tar archive of the
tree (the engine's own for docker, `tar` over exec for modal and gcp, `tarfile` without dereferencing
for the local provider) and `extract_tree` below, which keeps:

- regular files and directories;
- relative links whose target, resolved inside the archive itself, stays in the copied tree (a
  project's `node_modules/.bin/x -> ../x/cli.js`), copied as links;

and refuses (drops, and reports) everything else: absolute links, links leaving the tree or passing
through another link that does, members with an absolute or `..` name or under a link, hard links to
anything but an earlier file of the tree, device files, fifos. Python's own `tarfile` "data" filter runs
on what is kept as a second check (modes made safe, names and links checked against the disk).

What was refused is evidence: the caller that knows the trial records it with `mark_tampered`
(`download_checked`). Nothing here raises for a refusal: a planted link is the agent's doing, never
an infrastructure error to retry.
"""

from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentcompass.core.context import TrialContext
    from agentcompass.core.sandbox import Sandbox

MAX_LINK_HOPS = 40  # as the kernel's own limit on links followed while resolving one path
SPOOL_BYTES = 16 * 1024 * 1024


def extract_tree(archive: tarfile.TarFile, local: Path, label: str) -> list[str]:
    """Extract an archive whose members all sit under one top entry (the remote's basename, as the engine's
    get_archive and `tar -C parent -cf - name` make it) to `local` instead; returns what was refused, one
    phrase each (`label` names the remote tree in them). Nothing is written when the top itself is refused."""
    members = archive.getmembers()
    if not members:
        return []
    top = PurePosixPath(members[0].name).parts[0] if PurePosixPath(members[0].name).parts else ""
    links = {clean(m.name): m.linkname for m in members if m.issym()}
    refused: list[str] = []
    kept: list[tarfile.TarInfo] = []
    files: set[str] = set()
    for member in members:
        why = refusal(member, top, links, files)
        if why:
            refused.append(f"{shown(label, member.name, top)}: {why}")
            continue
        if member.isreg():
            files.add(clean(member.name))
        kept.append(member)
    local.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".agentcompass-download-", dir=local.parent))
    try:
        def second_check(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
            try:
                return tarfile.data_filter(member, dest)
            except tarfile.FilterError as exc:
                refused.append(f"{shown(label, member.name, top)}: {exc}")
                return None

        archive.extractall(staging, members=kept, filter=second_check)
        source = staging / top
        if os.path.lexists(source):
            place(source, local)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return refused


def place(source: Path, local: Path) -> None:
    """Move an extracted tree (or file) to `local`: a tree merges into a folder already there, a file replaces
    a file or lands inside a folder (as `cp` would put it)."""
    if not os.path.lexists(local):
        os.replace(source, local)
    elif source.is_dir() and not source.is_symlink():
        shutil.copytree(source, local, dirs_exist_ok=True, symlinks=True)
    elif local.is_dir() and not local.is_symlink():
        os.replace(source, local / source.name)
    else:
        os.replace(source, local)  # over a file or a link: replaced, never written through


def refusal(member: tarfile.TarInfo, top: str, links: dict[str, str], files: set[str]) -> str | None:
    """Why `member` may not be extracted, or None."""
    name = PurePosixPath(member.name)
    if name.is_absolute() or ".." in name.parts or not name.parts or name.parts[0] != top:
        return "a member named outside the copied tree"
    parts = clean(member.name).split("/")
    if any("/".join(parts[:i]) in links for i in range(1, len(parts))):
        return "a member under a link (written through it, it would land elsewhere)"
    if member.isdir() or member.isreg():
        return None
    if member.issym():
        resolved = resolve(parts[:-1], member.linkname, links)
        if resolved is None or resolved[:1] != [top]:
            return f"a link to {member.linkname}, out of the copied tree (not followed, not copied)"
        return None
    if member.islnk():
        if clean(member.linkname) not in files:
            return f"a hard link to {member.linkname}, not a file of the copied tree"
        return None
    kind = "a fifo" if member.isfifo() else "a device file" if member.isdev() else "a special file"
    return f"{kind} (not copied)"


def resolve(directory: list[str], target: str, links: dict[str, str], hops: int = 0) -> list[str] | None:
    """Where a link in `directory` pointing at `target` leads, resolved within the archive's own names
    (a component that is itself a link of the archive is followed there); None when it leaves the archive's
    root (an absolute target, a `..` above it) or loops."""
    if target.startswith("/") or hops > MAX_LINK_HOPS:
        return None
    path = list(directory)
    for part in target.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not path:
                return None
            path.pop()
            continue
        path.append(part)
        inner = links.get("/".join(path))
        if inner is not None:
            path = resolve(path[:-1], inner, links, hops + 1)  # type: ignore[assignment]
            if path is None:
                return None
    return path


def clean(name: str) -> str:
    return "/".join(p for p in PurePosixPath(name).parts if p not in ("", "."))


def shown(label: str, name: str, top: str) -> str:
    """A member as the sandbox names it: `/logs/artifacts/x` for member `artifacts/x` of `/logs/artifacts`."""
    parts = PurePosixPath(name).parts
    if name.startswith("/") or ".." in parts or parts[:1] != (top,):
        return f"{label} (archive member {name!r})"
    return "/".join([label.rstrip("/"), *clean(name).split("/")[1:]])


def copy_tree(source: Path, local: Path, label: str, root: Path) -> list[str]:
    """A host copy of `source` (a file or a directory under `root`, the sandbox's own folder on the host) to
    `local`, by the same rules as a download: links are never followed, neither inside the tree nor on the
    way to it from `root` (a parent the agent replaced with a link is refused whole)."""
    relative = source.relative_to(root)
    for depth in range(1, len(relative.parts)):
        parent = root.joinpath(*relative.parts[:depth])
        if parent.is_symlink():
            return [f"{label}: reached through {'/' + '/'.join(relative.parts[:depth])}, a link "
                    f"to {os.readlink(parent)} (not followed, not copied)"]
    with tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES) as spool:
        with tarfile.open(fileobj=spool, mode="w") as archive:
            archive.add(str(source), arcname=source.name)  # lstat: a link is archived as the link it is
        spool.seek(0)
        with tarfile.open(fileobj=spool, mode="r") as archive:
            return extract_tree(archive, local, label)


def download_checked(sandbox: "Sandbox", remote: str, local: Path, trial: "TrialContext") -> None:
    """`sandbox.download`, with what it refused recorded as the agent's tampering (the attempt is then failed
    and counted). FileNotFoundError when nothing was there to copy, or only what was refused."""
    refused = sandbox.download(remote, local) or []
    for evidence in refused:
        trial.mark_tampered(evidence)
    if refused and not os.path.lexists(local):
        raise FileNotFoundError(remote)


def contained(base: Path, path: Path) -> Path | None:
    """`path` (under `base`) resolved, if it is a regular file that stays inside `base` once every link on the
    way is followed; else None. What the viewer reads goes through here: an attempt's `leak.patch ->
    /etc/shadow`, or a link into another run's folder, is never opened."""
    try:
        real_base = base.resolve(strict=True)
        real = path.resolve(strict=True)
    except (OSError, RuntimeError):  # missing, or a loop of links
        return None
    if not real.is_relative_to(real_base) or not real.is_file():
        return None
    return real
