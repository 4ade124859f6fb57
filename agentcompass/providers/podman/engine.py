"""Where podman's API listens, and what to do when nothing answers there.

podman has no daemon: its API is `podman system service`, started by systemd's podman.socket (rootful:
`systemctl start podman.socket`; rootless: `systemctl --user start podman.socket`) or by hand. A rootless
service is the user's own, at $XDG_RUNTIME_DIR/podman/podman.sock, and its containers are that user's.
"""

from __future__ import annotations

import os
from typing import Any

ROOTFUL_SOCKET = "unix:///run/podman/podman.sock"
START_HINT = ("start podman's API service (`sudo systemctl start podman.socket`; rootless: `systemctl --user start "
              "podman.socket`, or `podman system service --time=0 unix://$XDG_RUNTIME_DIR/podman/podman.sock &`) or "
              "point --env-params '{\"host\": \"unix:///PATH.sock\"}' (or CONTAINER_HOST) at one that runs")


def podman_host(setting: str | None) -> str:
    """The socket to use and, for messages, where it came from: the setting, CONTAINER_HOST (podman's own
    variable), else the default socket of this process's user."""
    if setting:
        return setting
    if os.environ.get("CONTAINER_HOST"):
        return os.environ["CONTAINER_HOST"]
    if os.geteuid() == 0:
        return ROOTFUL_SOCKET
    runtime = os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{os.getuid()}"
    return f"unix://{runtime}/podman/podman.sock"


def host_source(setting: str | None) -> str:
    if setting:
        return "env.host"
    if os.environ.get("CONTAINER_HOST"):
        return "CONTAINER_HOST"
    return "this user's default"


def socket_path(host: str) -> str | None:
    """The file of a unix:// address (None for tcp:// and ssh://)."""
    return host[len("unix://"):] if host.startswith("unix://") else None


# The cgroup controllers a trial's limits need: memory (memory_mb), cpu (cpus), pids (pids_limit).
LIMIT_CONTROLLERS = ("memory", "cpu", "pids")


def engine_facts(api: Any) -> dict[str, Any]:
    """What podman's own (libpod) info says that its compatible info does not: rootless or not, the cgroup
    version and the cgroup controllers its containers get (rootless on cgroup v1: none, so no limits)."""
    host = api.get(f"{api.base_url}/v4.0.0/libpod/info", timeout=api.timeout).json().get("host") or {}
    return {"rootless": bool((host.get("security") or {}).get("rootless")),
            "cgroup": str(host.get("cgroupVersion") or "?"),
            "missing": [c for c in LIMIT_CONTROLLERS if c not in (host.get("cgroupControllers") or [])]}


def limits_lack(facts: dict[str, Any]) -> str | None:
    """Why this podman sets no cpu, memory or process limit (None: it sets them all)."""
    if not facts["missing"]:
        return None
    mode = "rootless" if facts["rootless"] else "rootful"
    return f"{mode} podman on cgroup {facts['cgroup']} has no {', '.join(facts['missing'])} controller for its containers"
