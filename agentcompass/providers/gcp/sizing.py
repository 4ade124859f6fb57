"""What a gcp trial's VM must be: a machine type the task fits in, and how many such VMs the project's
regional quotas let run at once (the env's default provider_limit). Both are read from Compute itself
(machineTypes.get, regions.get) once per run and kept; the SDK is imported inside the functions."""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any

from agentcompass.core.errors import UserError
from agentcompass.providers.remote import one_line

# Room the VM keeps for itself beside the task container (Container-Optimized OS, docker, the SSH daemon).
VM_RESERVED_MB = 768
# The types tried, smallest first, when the configured one is too small: general purpose, then more memory.
LADDER = ([f"e2-standard-{n}" for n in (2, 4, 8, 16, 32)] + [f"e2-highmem-{n}" for n in (2, 4, 8, 16)]
          + [f"n2-standard-{n}" for n in (48, 64, 80, 96, 128)] + [f"n2-highmem-{n}" for n in (32, 48, 64, 80, 96, 128)])
QUOTA_METRICS = ("CPUS", "IN_USE_ADDRESSES")  # what one more trial VM uses in its region


@dataclass(frozen=True)
class MachineType:
    name: str
    cpus: int
    memory_mb: int

    def fits(self, cpus: float | None, memory_mb: int | None) -> bool:
        return (cpus or 0) <= self.cpus and (memory_mb or 0) + VM_RESERVED_MB <= self.memory_mb


class Sizing:
    """Machine types of one zone, looked up once each (a name Compute does not know: None)."""

    def __init__(self, credentials: Any, project: str, zone: str) -> None:
        self.credentials, self.project, self.zone = credentials, project, zone
        self._known: dict[str, MachineType | None] = {}
        self._lock = threading.Lock()
        self._client: Any = None

    def lookup(self, name: str) -> MachineType | None:
        from google.api_core import exceptions as gexc
        from google.cloud import compute_v1

        with self._lock:
            if name in self._known:
                return self._known[name]
            if self._client is None:
                self._client = compute_v1.MachineTypesClient(credentials=self.credentials)
            try:
                found = self._client.get(project=self.project, zone=self.zone, machine_type=name)
                kind: MachineType | None = MachineType(name, int(found.guest_cpus), int(found.memory_mb))
            except gexc.NotFound:
                kind = None
            except gexc.GoogleAPICallError as exc:
                raise UserError(f"GCP cannot describe machine type {name} in {self.zone} ({one_line(exc)[:200]}); "
                                "check zone and the account's roles (`agentcompass env check gcp`)") from exc
            self._known[name] = kind
            return kind

    def choose(self, configured: str, cpus: float | None, memory_mb: int | None, task: str) -> MachineType:
        """The configured type when the task fits in it, else the smallest of LADDER that it fits in."""
        own = self.lookup(configured)
        if own is None:
            raise UserError(f"machine_type '{configured}' does not exist in zone {self.zone}; pick one of "
                            f"`gcloud compute machine-types list --zones {self.zone}`")
        if own.fits(cpus, memory_mb):
            return own
        for name in LADDER:
            kind = self.lookup(name)
            if kind is not None and kind.fits(cpus, memory_mb):
                return kind
        raise UserError(f"task '{task}' needs {cpus or 0:g} vCPUs and {memory_mb or 0} MiB; no machine type of zone "
                        f"{self.zone} has that much (beside {VM_RESERVED_MB} MiB for the VM itself); set machine_type, "
                        "or cap the task with --env-params '{\"cpu\": N, \"memory\": MIB}'")


def region_quotas(credentials: Any, project: str, region: str) -> dict[str, tuple[float, float]]:
    """{metric: (limit, usage)} of the region, for the metrics a trial VM uses."""
    from google.cloud import compute_v1

    region_info = compute_v1.RegionsClient(credentials=credentials).get(project=project, region=region)
    return {q.metric: (float(q.limit), float(q.usage)) for q in region_info.quotas if q.metric in QUOTA_METRICS}


def quota_limit(quotas: dict[str, tuple[float, float]], cpus: int, external_ip: bool) -> tuple[int, str]:
    """How many more VMs of `cpus` vCPUs (with an external IP or not) the quotas leave room for, and which
    quota decides it."""
    per_vm = {"CPUS": float(cpus), "IN_USE_ADDRESSES": 1.0 if external_ip else 0.0}
    room = {metric: math.floor((limit - usage) / per_vm[metric])
            for metric, (limit, usage) in quotas.items() if per_vm.get(metric)}
    if not room:
        return 0, ""
    metric = min(room, key=lambda m: room[m])
    return max(0, room[metric]), metric


def describe_quotas(quotas: dict[str, tuple[float, float]]) -> str:
    return ", ".join(f"{metric} {usage:g} of {limit:g} used" for metric, (limit, usage) in sorted(quotas.items()))
