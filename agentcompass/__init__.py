"""agentcompass: run any coding-agent benchmark with any harness, model and environment."""

__version__ = "0.1.0"
