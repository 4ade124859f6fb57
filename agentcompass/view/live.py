"""Which `agentcompass view` servers are running on this machine, so `report` can link its setups into one.

A viewer registers itself at start (`$AGENTCOMPASS_CACHE_DIR/viewers/<pid>.json`: its URL without the
token, and its roots) and removes the file when it stops; a file whose process is gone is ignored.
Standard library only: both report/ and view/ use it and neither imports the other through it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import quote

from agentcompass.core.paths import cache_root


def registry_dir() -> Path:
    return cache_root() / "viewers"


def register(url: str, roots: list[Path]) -> Path | None:
    """Announce this process's viewer; None when the cache dir cannot be written (no links then)."""
    path = registry_dir() / f"{os.getpid()}.json"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"pid": os.getpid(), "url": url, "roots": [str(r.resolve()) for r in roots]}))
    except OSError:
        return None
    return path


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive, but not ours to link to
        return False
    return True


def running() -> list[dict]:
    found = []
    for path in sorted(registry_dir().glob("*.json")):
        try:
            entry = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(entry, dict) and isinstance(entry.get("pid"), int) and alive(entry["pid"]):
            found.append(entry)
    return found


def link_to(run_dir: Path) -> str | None:
    """The URL of `run_dir`'s grid in a running viewer whose roots hold it, or None."""
    target = run_dir.resolve()
    for entry in running():
        for number, root in enumerate(entry.get("roots") or []):
            root_path = Path(root)
            if target == root_path or target.is_relative_to(root_path):
                rel = target.relative_to(root_path).as_posix()
                run_id = f"{number}/{rel}" if rel != "." else str(number)
                return f"{entry['url'].rstrip('/')}/run?run={quote(run_id)}"
    return None
