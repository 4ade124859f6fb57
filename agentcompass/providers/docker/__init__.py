"""The docker env: one container per trial (or a compose project), images built locally (build,
heredocs), compose projects (compose) and the allowlist egress proxy (egress)."""

from agentcompass.providers.docker.provider import DockerProvider

__all__ = ["DockerProvider"]
