"""The harness contract (agentcompass.core.contracts), re-exported for harnesses."""

from agentcompass.core.contracts import Harness, check_agent_tools

__all__ = ["Harness", "check_agent_tools"]
