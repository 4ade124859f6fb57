"""What compose services and the egress proxy need of the docker provider: its engine client, its settings
and the images it pulls or builds. A Protocol in a leaf, so compose and egress sit below the provider
instead of importing it back."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import docker

    from agentcompass.core.sandbox import ContainerSpec
    from agentcompass.providers.docker.settings import DockerSettings


class DockerEngine(Protocol):
    settings: "DockerSettings"

    @property
    def client(self) -> "docker.DockerClient": ...

    def service_image(self, service: "ContainerSpec", log_dir: Path | None) -> str:
        """A compose service's image, pulled or built."""
        ...

    def egress_image(self, log_dir: Path | None) -> str:
        """The egress proxy's image, built once per engine."""
        ...
