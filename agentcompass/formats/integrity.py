"""Reward integrity: what a verifier reads is never what the agent left there.

Before a verifier runs, every format clears the paths its verifier reads that the agent could have
written (reward files, the tests folder, patch folders) and then uploads the tests afresh, as
Harbor 0.26 does (harbor/verifier/verifier.py: _remove_reward_files before the upload) and as
terminal-bench 0.2.18 copies its tests in only after the agent. What was found there is returned,
so the trial can record that the agent touched a verifier path (`details.tampering`) without the
verdict rules changing: the verifier then runs on fresh inputs exactly as the official one does.
"""

from __future__ import annotations

import os
import shlex
import shutil
from typing import TYPE_CHECKING, Any

from agentcompass.core.errors import InfraError

if TYPE_CHECKING:
    from agentcompass.core.sandbox import Sandbox

CLEAR_TIMEOUT_S = 120


def clear_verifier_inputs(sandbox: "Sandbox", *, dirs: tuple[str, ...] = (), files: tuple[str, ...] = (),
                          make: tuple[str, ...] = (), keep: dict[str, str] | None = None) -> list[str]:
    """Empty `dirs` and remove `files`, then make the `make` dirs; returns the paths of `dirs` and `files`
    that were there (a dir counts when it holds anything). One command, as root. A dir is emptied, not
    removed: a shell started before (the local provider's bubblewrap binds it) still sees the new one.
    `keep` {dir: user} gives each dir to the user who runs the verifier, writable by that user only, until
    the agent's next phase (its parent, /logs or /, is root's and not writable by others: no other user's
    process can swap the dir either)."""
    host_path = getattr(sandbox, "host_path", None)
    if callable(host_path):  # the local provider: its sandbox paths are host paths under its workspace
        return clear_on_host(host_path, dirs, files, make)
    quoted = {p: shlex.quote(p) for p in (*dirs, *files, *make)}
    probe = [f'[ -n "$(ls -A {quoted[d]} 2>/dev/null)" ] && echo {quoted[d]}' for d in dirs]
    probe += [f"{{ [ -e {quoted[f]} ] || [ -L {quoted[f]} ]; }} && echo {quoted[f]}" for f in files]
    steps = [f"{{ {p}; }}" for p in probe] + ["true"]
    removal = [f"if [ -d {quoted[d]} ] && [ ! -L {quoted[d]} ]; then find {quoted[d]} -mindepth 1 -maxdepth 1 "
               f"-exec rm -rf -- {{}} +; else rm -f -- {quoted[d]}; fi" for d in dirs]
    removal += [f"rm -rf -- {quoted[f]}" for f in files]
    if make:
        removal.append("mkdir -p -- " + " ".join(quoted[p] for p in make))
    # The dirs are given to the verifier's user first: no other user's process can then put anything back.
    keeping = []
    for path, user in (keep or {}).items():
        q = shlex.quote(path)
        # (the verifier must always be able to write: where its user cannot be given the dir, it stays open)
        keeping.append(f"{{ {{ [ ! -L {q} ] || rm -f -- {q}; }} && mkdir -p -- {q} && "
                       f"{{ chown -- {shlex.quote(user)} {q} && chmod 755 {q}; }} 2>/dev/null || chmod 777 {q}; }}")
    removal = keeping + removal
    script = "; ".join(steps) + (" && " + " && ".join(removal) if removal else "")
    result = sandbox.exec(script, user="root", timeout=CLEAR_TIMEOUT_S)
    if not result.ok:
        raise InfraError(f"cannot clear the verifier's inputs ({', '.join((*dirs, *files))}) before grading: "
                         f"{(result.stderr or result.stdout).strip()[-200:]}")
    found = set(result.stdout.split())
    return [p for p in (*dirs, *files) if p in found]


def clear_on_host(host_path: Any, dirs: tuple[str, ...], files: tuple[str, ...], make: tuple[str, ...]) -> list[str]:
    """The local provider's clearing, on its workspace. No link is followed: a link the agent put in place of a
    folder on the way (`/logs/verifier -> /home/me`) is removed, not emptied through, and counts as found."""
    found = unlink_links_above(host_path, (*dirs, *files, *make))
    for path in dirs:
        local = host_path(path)
        if os.path.isdir(local) and not os.path.islink(local):
            entries = os.listdir(local)
            if entries:
                found.append(path)
            for entry in entries:
                inner = os.path.join(local, entry)
                if os.path.isdir(inner) and not os.path.islink(inner):
                    shutil.rmtree(inner)
                else:
                    os.unlink(inner)
        elif os.path.lexists(local):
            found.append(path)
            os.unlink(local)
    for path in files:
        local = host_path(path)
        if os.path.lexists(local):
            found.append(path)
            if os.path.isdir(local) and not os.path.islink(local):
                shutil.rmtree(local)
            else:
                os.unlink(local)
    for path in make:
        os.makedirs(host_path(path), exist_ok=True)
    return found


def unlink_links_above(host_path: Any, paths: tuple[str, ...]) -> list[str]:
    """Remove every link among the sandbox folders above `paths` (on the host: they would lead a removal out of
    the workspace); returns the sandbox paths that were links."""
    found: list[str] = []
    for path in paths:
        parts = path.strip("/").split("/")
        for depth in range(1, len(parts)):
            above = "/" + "/".join(parts[:depth])
            local = host_path(above)
            if os.path.islink(local):
                os.unlink(local)
                found.append(above)
    return found


def tampering_note(found: list[str], expected: tuple[str, ...] = ()) -> list[str]:
    """The verifier paths the agent left something in (those the format itself put there left out)."""
    return [p for p in found if p not in expected]
