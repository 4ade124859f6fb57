"""The podman env's settings (`providers/podman.yaml`, `--env-params`): the docker env's, plus where podman's API
listens. A leaf, as the docker settings are."""

from __future__ import annotations

from typing import Literal

from agentcompass.providers.docker.settings import DockerSettings


class PodmanSettings(DockerSettings):
    # podman's API socket, e.g. unix:///run/podman/podman.sock. None: CONTAINER_HOST, else this user's default
    # socket (root's /run/podman/podman.sock; a user's $XDG_RUNTIME_DIR/podman/podman.sock, rootless).
    host: str | None = None
    # Rootless podman on cgroup v1 sets no memory, cpu or process limit (it warns and runs without):
    # best_effort runs the trials so (one warning per run), required refuses to run on such a host.
    limits: Literal["best_effort", "required"] = "best_effort"
