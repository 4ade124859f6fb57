"""Around a shared verifier: what the agent changed outside its workdir, read before the tests run, and the
evidence that fails an attempt whose agent planted something the verifier would run (formats/tamper.py sorts
the changes). The formats call `check_changes` before their verify step; it costs one engine call on docker
(the container-changes API) and one exec more only where a `.pth` file was added or changed.

Where the list comes from, per env:
- docker: the engine's container changes (`docker diff`): every file added or changed since the image,
  which a process without CAP_SYS_ADMIN cannot hide (a change copies the file up into the container's layer);
- local: the workspace's own folders (the host's system folders are bound read-only, so only the workdir,
  /tmp, /logs and the like can hold what the agent wrote);
- modal, gcp: no list (their sandboxes offer none): nothing is checked there, as the docs say.
"""

from __future__ import annotations

import os
import shlex
import uuid
from typing import TYPE_CHECKING, Any

from agentcompass.formats.tamper import SHOWN, STARTUP_HOOK, pth_verdicts, sort_changes
from agentcompass.providers.remote import EXEC_MARK

if TYPE_CHECKING:
    from agentcompass.core.context import TrialContext
    from agentcompass.core.sandbox import Sandbox

PTH_BYTES = 65536  # of each .pth: site.py runs any line that starts with import, wherever it is


def check_changes(sandbox: "Sandbox", workdir: str, trial: "TrialContext") -> dict[str, Any]:
    """Fail the attempt (mark_tampered) for each change that could run the agent's code in the verifier; return
    the rest for the attempt's details (`changed_outside_workdir`: how many, the first ones), {} when none."""
    changes = listed_changes(sandbox)
    if changes is None:
        return {}
    sorted_ = sort_changes(changes, workdir)
    verdict, evidence = list(sorted_.verdict), list(sorted_.evidence)
    if sorted_.pth:
        hooks, recorded = pth_files(sandbox, sorted_.pth)
        found, installed = pth_verdicts(hooks, recorded)
        verdict += found
        evidence += installed
    for item in verdict:
        trial.mark_tampered(item)
    return {"changed_outside_workdir": {"count": len(evidence), "paths": sorted(evidence)[:SHOWN]}} if evidence else {}


def listed_changes(sandbox: "Sandbox") -> list[tuple[str, str]] | None:
    """(kind, path) of what the agent added ("A") or changed ("C"); None where the env cannot say."""
    changes = getattr(sandbox, "changes", None)
    if callable(changes):
        return changes()
    root = getattr(sandbox, "fs", None)  # the local provider: sandbox paths are host paths under its workspace
    if isinstance(root, os.PathLike) and callable(getattr(sandbox, "host_path", None)):
        return walk_workspace(os.fspath(root))
    return None


def walk_workspace(root: str) -> list[tuple[str, str]]:
    """The files under a local sandbox's workspace that could be hooks (startup hooks, .pth files), as sandbox
    paths: there the host's own folders are read-only, so nothing else could be."""
    found = []
    for folder, dirs, files in os.walk(root):
        for name in (*files, *dirs):
            if name.endswith(".pth") or STARTUP_HOOK.match(name):
                found.append(("A", "/" + os.path.relpath(os.path.join(folder, name), root)))
    return found


def pth_files(sandbox: "Sandbox", paths: list[str]) -> tuple[dict[str, str], set[str]]:
    """Each .pth's text (its first PTH_BYTES) and which of them an installed distribution lists (pip's RECORD
    in the same folder, or dpkg's file lists)."""
    host_path = getattr(sandbox, "host_path", None)
    if callable(host_path):
        return _pth_on_host(host_path, paths)
    mark = uuid.uuid4().hex
    steps = []
    for path in paths:
        q, folder, name = shlex.quote(path), shlex.quote(os.path.dirname(path)), shlex.quote(os.path.basename(path) + ",")
        # pip's installs list it in their RECORD, apt's (Debian's -nspkg.pth files) in dpkg's file lists
        steps.append(f"echo {mark} {q}; if cat {folder}/*.dist-info/RECORD 2>/dev/null | grep -qF -- {name} || "
                     f"grep -qxF -- {q} /var/lib/dpkg/info/*.list 2>/dev/null; "
                     f"then echo recorded; else echo unrecorded; fi; head -c {PTH_BYTES} -- {q} 2>/dev/null; echo")
    result = sandbox.exec("; ".join(steps), user="root", timeout=60)
    texts, recorded = {}, set()
    for chunk in result.stdout.split(mark + " ")[1:]:
        head, _, body = chunk.partition("\n")
        status, _, text = body.partition("\n")
        texts[head] = text
        if status == "recorded":
            recorded.add(head)
    for path in paths:  # one the output lost (cut at the exec's cap) is read as having no import line
        texts.setdefault(path, "")
    return texts, recorded


def _pth_on_host(host_path: Any, paths: list[str]) -> tuple[dict[str, str], set[str]]:
    texts, recorded = {}, set()
    for path in paths:
        local = host_path(path)
        try:
            with open(local, "rb") as handle:
                texts[path] = handle.read(PTH_BYTES).decode("utf-8", errors="replace")
        except OSError:
            texts[path] = ""
        folder, name = os.path.dirname(local), os.path.basename(path) + ","
        try:
            infos = [e for e in os.listdir(folder) if e.endswith(".dist-info")]
        except OSError:
            infos = []
        for info in infos:
            try:
                with open(os.path.join(folder, info, "RECORD"), encoding="utf-8", errors="replace") as record:
                    if any(line.startswith(name) for line in record):
                        recorded.add(path)
            except OSError:
                pass
    return texts, recorded


def echo_watchers(mark: str, when: str, paths: tuple[str, ...]) -> str:
    """Shell that prints `mark watcher WHEN PID NAME` for each process not of this command (told by its exec mark)
    that holds a file under `paths` open or an inotify watch on one of them or their entries: a process the agent
    left running to rewrite the verdict the moment the verifier writes it. Runs as the verifier's user, so a
    root verifier sees every process. Quiet where /proc or the tools are missing."""
    targets = " ".join(f"{shlex.quote(p)} {shlex.quote(p)}/*" for p in paths)
    links = " -o ".join(f"-lname {shlex.quote(p)} -o -lname {shlex.quote(p + '/*')}" for p in paths)
    return (f"{{ pat=$(stat -c %i {targets} 2>/dev/null | while read -r i; do printf 'ino:%x |' \"$i\"; done); "
            f"{{ [ -z \"$pat\" ] || grep -lE \"^inotify.*(${{pat%|}})\" /proc/[0-9]*/fdinfo/*; "
            # the same file, not only the same path: a process of another sandbox on a shared kernel (a fake
            # Modal, a host without PID namespaces) holds its own /logs/verifier under that path
            f"ids=\" $(stat -L -c %d:%i {targets} 2>/dev/null | tr '\\n' ' ')\"; "
            f"find /proc/[0-9]*/fd -maxdepth 1 \\( {links} \\) | while read -r f; do "
            f"case \"$ids\" in *\" $(stat -L -c %d:%i \"$f\" 2>/dev/null) \"*) echo \"$f\";; esac; done; "
            f"}} 2>/dev/null | cut -d/ -f3 | sort -u | "
            f"while read -r pid; do e=$(tr '\\0' '\\n' < /proc/$pid/environ) || continue; "
            f"printf '%s\\n' \"$e\" | grep -qxF \"{EXEC_MARK}=${EXEC_MARK}\" || "
            f"echo \"{mark} watcher {when} $pid $(cat /proc/$pid/comm)\"; done; }} 2>/dev/null")


def watchers(stdout: str, mark: str) -> list[str]:
    """The processes `echo_watchers` named, as evidence lines."""
    prefix = f"{mark} watcher "
    return [f"process {pid} ({name or '?'}) outside the verifier held or watched its folders {when} test.sh ran"
            for line in stdout.splitlines() if line.startswith(prefix)
            for when, pid, name in [(line[len(prefix):].split(" ", 2) + ["", ""])[:3]]]
