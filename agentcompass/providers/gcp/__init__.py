"""The gcp env: trials on Compute Engine VMs over SSH (provider, vm, ssh, oslogin, sizing), batch grading
on Cloud Batch (batch, eval), results through Cloud Storage (storage), and the first-run set-up (setup)."""

from agentcompass.providers.gcp.eval import GcpBatchProvider
from agentcompass.providers.gcp.provider import GcpProvider

__all__ = ["GcpBatchProvider", "GcpProvider"]
