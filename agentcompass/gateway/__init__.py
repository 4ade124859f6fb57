"""The per-run model gateway: a forwarder for agents that make their own model calls (installed CLIs),
with tier rewriting and metering (server), its HTTP app (app) and the preflight of one request (check)."""

from agentcompass.gateway.server import Gateway

__all__ = ["Gateway"]
