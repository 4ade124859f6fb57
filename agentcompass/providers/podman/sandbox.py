"""A podman trial's container: the docker sandbox, with podman's storage and the trial's own network.

Where podman differs from docker here: its overlay driver is called `overlay` (docker's `overlay2`) and lives
under /var/lib/containers/storage (rootful) or the user's ~/.local/share/containers/storage (rootless). The
upper dir is walked only by root: a rootless container's files belong to the user's subordinate ids, and a
directory a container user made private (mode 700) would hide what is under it from a walk by anyone else,
where the engine's changes API (`podman diff`) sees everything. Closing also removes the trial's network.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from agentcompass.providers.docker.sandbox import DockerSandbox
from agentcompass.providers.podman.engine import podman_host
from agentcompass.providers.podman.network import remove_network

if TYPE_CHECKING:
    import docker


class PodmanSandbox(DockerSandbox):
    def __init__(self, client: "docker.DockerClient", *args: Any, **kwargs: Any) -> None:
        super().__init__(client, *args, **kwargs)
        self.overlay_driver = "overlay" if os.geteuid() == 0 else None
        self.trial_network: str | None = None  # the trial's own network (network.py), removed with it

    def attach_hint(self) -> str:
        url = podman_host(getattr(self.settings, "host", None))  # the service this trial's container lives in
        return f"podman --url {url} exec -it {self.spec.name} bash   (remove it with: podman --url {url} rm -f {self.spec.name})"

    def close(self) -> None:
        try:
            super().close()
        finally:
            if self.trial_network:
                remove_network(self.api, self.trial_network)
                self.trial_network = None
