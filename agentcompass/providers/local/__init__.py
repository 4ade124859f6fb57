"""The local env: trials on this machine, each in its own workspace (bubblewrap where it is installed)."""

from agentcompass.providers.local.provider import LocalProvider, LocalSandbox

__all__ = ["LocalProvider", "LocalSandbox"]
