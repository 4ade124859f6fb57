"""The docker env: one container per trial (or a compose project). The provider (provider) with its
settings (settings), the images it pulls or builds (images; builds in build, heredocs), its sandboxes
(sandbox), compose projects (compose) and the allowlist egress proxy (egress), which reach the provider
only through the DockerEngine Protocol (engine)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentcompass.core.faces import lazy_attributes

if TYPE_CHECKING:
    from agentcompass.providers.docker.provider import DockerProvider

PUBLIC = {"DockerProvider": "agentcompass.providers.docker.provider"}
__all__ = sorted(PUBLIC)

__getattr__ = lazy_attributes(__name__, PUBLIC)
