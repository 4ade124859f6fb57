"""The docker env: one container per trial (or a compose project). The provider (provider) with its
settings (settings), the images it pulls or builds (images; builds in build, heredocs), its sandboxes
(sandbox), compose projects (compose) and the allowlist egress proxy (egress), which reach the provider
only through the DockerEngine Protocol (engine)."""

from agentcompass.providers.docker.provider import DockerProvider

__all__ = ["DockerProvider"]
