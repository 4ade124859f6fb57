"""The podman env: the docker provider's code over podman's Docker-compatible API (rootful or rootless). The
provider (provider) and its settings (settings) with where the socket is (engine), each trial's isolated
network (network), its sandboxes (sandbox), its builds (images) and `env check podman` (readiness). What the
two engines do differently is said where the code differs, and in docs/environments/podman.md."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentcompass.core.faces import lazy_attributes

if TYPE_CHECKING:
    from agentcompass.providers.podman.provider import PodmanProvider

PUBLIC = {"PodmanProvider": "agentcompass.providers.podman.provider"}
__all__ = sorted(PUBLIC)

__getattr__ = lazy_attributes(__name__, PUBLIC)
