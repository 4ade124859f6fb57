"""The per-run model gateway: a forwarder for agents that make their own model calls (installed CLIs),
with tier rewriting and metering (server), its HTTP app (app) and the preflight of one request (check)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentcompass.core.faces import lazy_attributes

if TYPE_CHECKING:
    from agentcompass.gateway.server import Gateway

PUBLIC = {"Gateway": "agentcompass.gateway.server"}
__all__ = sorted(PUBLIC)

__getattr__ = lazy_attributes(__name__, PUBLIC)
