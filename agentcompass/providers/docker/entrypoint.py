"""The image's ENTRYPOINT, honoured as Harbor honours it, and a keep-alive where the image would exit.

Harbor's compose file replaces the task image's CMD with `sh -c "sleep infinity"` and keeps its ENTRYPOINT:
an entrypoint that starts a service (a web server a healthcheck or the tests ask) and then execs its
arguments leaves both running. So do we (provider.KEEP_ALIVE as the command). An entrypoint that ignores
its arguments and exits (`/bin/false`, a one-shot script) would leave no container for the trial, where
Harbor reports the environment failed to start: it gets the keep-alive alone instead, with a warning, so the
task still runs (a deliberate difference, docs/deliberate-differences.md).
"""

from __future__ import annotations

import time
from typing import Any

import structlog

log = structlog.get_logger("agentcompass")

# How long an image's entrypoint may take to reach the keep-alive (or to prove it is a service that ignores
# its arguments) before the trial goes on; images without an entrypoint skip this entirely.
SETTLE_S = 2.0
KEEP_ALIVE_MARK = "sleep 3600"  # the keep-alive's child, in the container's process list


def image_entrypoint(api: Any, image: str) -> list[str]:
    return list(api.inspect_image(image)["Config"].get("Entrypoint") or [])


def entrypoint_exited(api: Any, container: str, name: str) -> bool:
    """True when the container's entrypoint ended before the keep-alive ran (the container exited); False as
    soon as the keep-alive runs, or when a process that ignores its arguments is still running at SETTLE_S."""
    import docker

    deadline = time.monotonic() + SETTLE_S
    while True:
        state = api.inspect_container(container)["State"]
        if not state.get("Running"):
            log.warning("the image's ENTRYPOINT exited instead of running its arguments (Harbor's keep-alive); "
                        "the container runs the keep-alive alone", container=name, exit_code=state.get("ExitCode"))
            return True
        try:
            processes = api.top(container).get("Processes") or []
        except docker.errors.APIError:  # it stopped between the two calls: the next inspect says so
            processes = []
        if any(KEEP_ALIVE_MARK in " ".join(row) for row in processes) or time.monotonic() > deadline:
            return False
        time.sleep(0.05)
