"""What a container added, changed or deleted since its image, read from the engine's own storage where this
process can read it (overlay2's upper dir, on the engine's host), else from the engine's container-changes
API (`docker diff`).

Why both: the API is the portable way, but some engines compute it by comparing the whole container tree with
the image's (about a second for a small Debian image, more for a large one) where overlay2's upper dir holds
exactly what the container wrote, so walking it costs what the agent changed. Neither can be fooled from inside
the container: writing a file of the image copies it up into the upper dir, and the walk happens on the host.
"""

from __future__ import annotations

import os
import stat
from typing import Any


def storage_dirs(inspected: dict[str, Any], driver_name: str = "overlay2") -> tuple[str, list[str]] | None:
    """(upper dir, lower dirs) of an overlay container whose upper dir this process can read, else None.
    `driver_name`: the engine's name for its overlay driver (docker's overlay2; podman calls it overlay)."""
    driver = inspected.get("GraphDriver") or {}
    data = driver.get("Data") or {}
    upper, lower = data.get("UpperDir"), data.get("LowerDir") or ""
    if driver.get("Name") != driver_name or not upper:
        return None
    try:
        os.listdir(upper)
    except OSError:  # another host's engine, or not ours to read (only root reads /var/lib/docker)
        return None
    return upper, [d for d in lower.split(":") if d]


def overlay_changes(upper: str, lowers: list[str]) -> list[tuple[str, str]]:
    """(kind, path) as `docker diff` lists them: "A" added, "C" changed (the path is in the image), "D" deleted
    (an overlay whiteout: a character device 0/0)."""
    found: list[tuple[str, str]] = []
    for folder, dirs, files in os.walk(upper):
        for name in (*dirs, *files):
            local = os.path.join(folder, name)
            path = "/" + os.path.relpath(local, upper)
            try:
                info = os.lstat(local)
            except OSError:
                continue
            if stat.S_ISCHR(info.st_mode) and info.st_rdev == 0:
                found.append(("D", path))
            else:
                found.append(("C" if any(os.path.lexists(lower + path) for lower in lowers) else "A", path))
    return found
