"""A local provider whose sandboxes fail to close (after really closing), as a docker engine that
refuses to remove a container would: loaded by tests through a provider YAML's dotted `impl:`."""

from __future__ import annotations

from typing import Any

from agentcompass.core.errors import InfraError
from agentcompass.providers.local.provider import LocalProvider
from agentcompass.core.sandbox import SandboxSpec


class CloseFailsProvider(LocalProvider):
    def open(self, spec: SandboxSpec) -> Any:
        sandbox = super().open(spec)
        close = sandbox.close

        def failing_close() -> None:
            close()
            raise InfraError(f"cannot remove container {spec.name}: the engine said no")

        sandbox.close = failing_close
        return sandbox
