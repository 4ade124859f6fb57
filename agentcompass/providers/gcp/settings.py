"""The gcp env's settings (`environments.gcp`, --env-params): one model, read by the provider that
inserts the VMs, by each sandbox on one, by `eval` on GCP Batch (its `batch` block) and by `env check gcp`."""

from __future__ import annotations

from pydantic import AliasChoices, Field

from agentcompass.core.sandbox import DEFAULT_OUTPUT_CAP
from agentcompass.core.schema import Positive, PositiveInt, Strict
from agentcompass.providers.gcp.batch import BatchSettings

# What a VM's account needs to pull a private task image from Artifact Registry (or Container Registry): read-only
# Cloud Storage access; the account's IAM roles (roles/artifactregistry.reader) then decide which repositories.
READ_STORAGE_SCOPE = "https://www.googleapis.com/auth/devstorage.read_only"


class GcpSettings(Strict):
    project_id: str | None = None
    zone: str = "us-central1-a"
    zones: list[str] = []  # further zones to try, in order, when one is out of capacity
    region: str | None = None  # default: the zone's
    machine_type: str = "e2-medium"
    vm_image_family: str = "cos-stable"
    vm_image_project: str = "cos-cloud"
    disk_gb: PositiveInt = 50
    network: str = "default"
    git_network: str | None = None  # CooperBench's name for the VPC; wins over network
    subnetwork: str | None = None
    external_ip: bool = True  # SSH reaches the VM at its external address; false: its internal one
    network_tags: list[str] = ["agentcompass-ssh"]  # the firewall rule allowing SSH targets these
    # The trial VMs' service account: none unless named (an agent that reached the metadata server would hold its
    # token). An e-mail, or "default" for the project's Compute default account, gets only `service_account_scopes`.
    service_account: str | None = None
    service_account_scopes: list[str] = [READ_STORAGE_SCOPE]  # read-only storage: enough to pull private images
    os_login: bool | None = None  # null: detected (org policy compute.requireOsLogin); true: always
    os_login_account: str | None = None  # whose OS Login profile gets the run's key; default the credentials' e-mail
    spot: bool = False
    labels: dict[str, str] = {}
    image: str | None = None  # run-wide registry image for every task, instead of the task's own
    cpu: Positive | None = Field(None, validation_alias=AliasChoices("cpus", "cpu"))  # overrides the task's cpus (container limit)
    memory: PositiveInt | None = Field(None, validation_alias=AliasChoices("memory_mb", "memory"))  # MiB; overrides the task's
    timeout_s: PositiveInt | None = None  # the VM's time-to-live; default the task's lifetime + boot_timeout_s
    boot_timeout_s: Positive = 600.0  # VM up, image pulled or built, container started
    operation_timeout_s: Positive = 600.0  # one insert or delete operation
    ssh_user: str = "agentcompass"
    ssh_port: PositiveInt = 22
    sudo: bool = True  # the SSH user runs docker and writes the VM's state through sudo
    shell: str = "bash"  # runs every exec'd command: SHELL -c CMD
    output_cap_bytes: PositiveInt = DEFAULT_OUTPUT_CAP
    credentials_file: str | None = None  # a service-account key file (private --config only)
    batch: BatchSettings = BatchSettings()  # `eval`/`validate` on gcp: ONE GCP Batch job (providers/gcp/eval.py)

    @property
    def default_region(self) -> str:
        """`region`, else the zone's (Batch jobs and subnetworks live in a region)."""
        return self.region or self.zone.rsplit("-", 1)[0]
