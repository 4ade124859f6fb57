"""The local env: trials on this machine, each in its own workspace (bubblewrap where it is installed)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentcompass.core.faces import lazy_attributes

if TYPE_CHECKING:
    from agentcompass.providers.local.provider import LocalProvider
    from agentcompass.providers.local.provider import LocalSandbox

PUBLIC = {"LocalProvider": "agentcompass.providers.local.provider", "LocalSandbox": "agentcompass.providers.local.provider"}
__all__ = sorted(PUBLIC)

__getattr__ = lazy_attributes(__name__, PUBLIC)
