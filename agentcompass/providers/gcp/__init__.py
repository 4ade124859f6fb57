"""The gcp env: trials on Compute Engine VMs over SSH (provider, vm, ssh, oslogin, sizing), batch grading
on Cloud Batch (batch, eval), results through Cloud Storage (storage), and the first-run set-up (setup)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentcompass.core.faces import lazy_attributes

if TYPE_CHECKING:
    from agentcompass.providers.gcp.eval import GcpBatchProvider
    from agentcompass.providers.gcp.provider import GcpProvider

PUBLIC = {"GcpBatchProvider": "agentcompass.providers.gcp.eval", "GcpProvider": "agentcompass.providers.gcp.provider"}
__all__ = sorted(PUBLIC)

__getattr__ = lazy_attributes(__name__, PUBLIC)
