"""The gcp provider: each trial on its own Compute Engine VM, the task container inside it.

Per trial a VM is inserted (labels agentcompass/run/trial, an idempotent request id, a
server-side time-to-live: `scheduling.max_run_duration` with termination action DELETE, so a
VM deletes itself if the orchestrator dies). Its start-up script pulls the task image (or
builds the task's Dockerfile, whose context arrives over SSH) and starts the task container
with its limits and network policy. Commands then run as `docker exec` over SSH with a per-run
ephemeral key injected through instance metadata; files move as tar streams over the same
channel (sandbox.py). A zone out of capacity tries the next configured zone. Close deletes the
VM and waits.

Project: environments.gcp.project_id (private --config) > GOOGLE_CLOUD_PROJECT > the project of
Application Default Credentials (or of `credentials_file`). The google-cloud SDK is imported
inside the methods that use it, never when the CLI starts.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from typing import Any

from agentcompass.core.errors import InfraError, UserError
from agentcompass.core.sandbox import SandboxSpec, common_refusals
from agentcompass.providers.gcp.api import (ROLES_HINT, delete_instance, gcp_credentials, insert_failure,
                                            wait_for)
from agentcompass.providers.gcp.sandbox import GcpSandbox
from agentcompass.providers.gcp.settings import GcpSettings
from agentcompass.providers.gcp.ssh import EphemeralKey
from agentcompass.providers.gcp.vm import disk_gb, instance_name, label_key, label_value, labels_filter, startup_script
from agentcompass.providers.remote import one_line

DEFAULT_LIFETIME_S = 2 * 3600  # when neither the settings nor the task say how long a VM may live


def named_account(account: str | None) -> bool:
    """Whether the user named a service account for the VMs ("default" names the Compute default); "none" and
    null name none."""
    return bool(account) and str(account).lower() != "none"


class GcpProvider:
    name = "gcp"
    extra, extra_modules = "gcp", ("google.cloud.compute_v1", "paramiko")

    Settings = GcpSettings

    def __init__(self, keep: bool = False, **settings: Any) -> None:
        self.settings = self.Settings(**settings)
        self.keep = keep
        self._lock = threading.Lock()
        self._instances: Any = None
        self._project: str | None = None
        self._credentials: Any = None
        self._key: EphemeralKey | None = None
        self._sizing: Any = None
        self._ssh_user: str | None = None  # the OS Login POSIX user, once the key is imported
        self._quota_checked = False
        self._listed = False
        self._largest_cpus = 0
        self.default_provider_limit: int | None = None  # from the regional quotas, read by check()
        self.aborting = threading.Event()  # set on Ctrl-C: VMs still booting give up and are deleted
        self._booting: dict[str, str] = {}  # VM name -> zone, from its insert until open() hands it over
        self.delete_requested: set[str] = set()  # VMs interrupt() asked GCE to delete: no second delete

    @classmethod
    def readiness(cls, settings: dict[str, Any], live: bool, config_source: str = "") -> Any:
        """`env check gcp`: sources in use, then (live) credentials, APIs, the SSH firewall rule, the bucket."""
        from agentcompass.providers.gcp.setup import gcp_readiness

        return gcp_readiness(cls.Settings(**settings), live, config_source)

    def interrupt(self) -> None:
        """The run is ending (Ctrl-C, SIGTERM; the scheduler calls this): stop waiting for VMs to come up, and
        ask GCE now to delete every VM still booting. A trial thread notices the interrupt only at its next
        poll (seconds), and the process may be gone by then: a VM nobody deletes is billed until its
        max_run_duration. The delete is only requested here (GCE finishes it without us)."""
        self.aborting.set()
        with self._lock:
            booting = dict(self._booting)
        if not booting or self._instances is None:
            return
        from concurrent.futures import ThreadPoolExecutor

        def request_delete(name: str, zone: str) -> None:
            from google.cloud import compute_v1

            with contextlib.suppress(Exception):  # already gone, or being deleted by its trial
                self._instances.delete(request=compute_v1.DeleteInstanceRequest(
                    project=self._project, zone=zone, instance=name, request_id=str(uuid.uuid4())))
                with self._lock:  # only once GCE took it: a refused request leaves the delete to its trial
                    self.delete_requested.add(name)

        with ThreadPoolExecutor(max_workers=min(16, len(booting))) as pool:
            for name, zone in booting.items():
                pool.submit(request_delete, name, zone)

    # -- connection ----------------------------------------------------------------------
    def _connect(self) -> tuple[Any, str]:
        """One InstancesClient and the project, shared by every trial of the run."""
        with self._lock:
            if self._instances is None:
                from google.cloud import compute_v1

                from agentcompass.providers.gcp.sizing import Sizing

                credentials, project = gcp_credentials(self.settings.project_id, self.settings.credentials_file)
                self._instances = compute_v1.InstancesClient(credentials=credentials)
                self._credentials, self._project = credentials, project
                self._sizing = Sizing(credentials, project, self.settings.zone)
            return self._instances, str(self._project)

    def _ssh_key(self) -> EphemeralKey:
        """The run's key; with OS Login (enforced, or os_login: true) imported into the account's profile."""
        from agentcompass.providers.gcp import oslogin as gcp_oslogin
        self._connect()
        with self._lock:
            if self._key is None:
                key = EphemeralKey()
                use = self.settings.os_login
                if use is None:
                    use = bool(gcp_oslogin.os_login_enforced(self._credentials, str(self._project)))
                if use:
                    account = gcp_oslogin.account_of(self._credentials, self.settings.os_login_account)
                    self._ssh_user = gcp_oslogin.import_key(self._credentials, str(self._project), account, key.public_line)
                self._key = key
            return self._key

    @property
    def ssh_user(self) -> str:
        return self._ssh_user or self.settings.ssh_user

    def machine_type_for(self, spec: SandboxSpec) -> str:
        """The configured machine type when the task fits in it, else the smallest e2/n2 type it fits in."""
        self._connect()
        cpus, memory = self.settings.cpu or spec.cpus, self.settings.memory or spec.memory_mb
        return str(self._sizing.choose(self.settings.machine_type, cpus, memory, spec.name).name)

    def _check_quotas(self, spec: SandboxSpec) -> None:
        """The default provider_limit: as many VMs as the region's CPUS and IN_USE_ADDRESSES quotas leave
        room for (a new project has 24 vCPUs and 8 addresses), so a run does not start more than fit."""
        from google.api_core import exceptions as gexc

        from agentcompass.providers.gcp.sizing import describe_quotas, quota_limit, region_quotas

        cpus = self._sizing.choose(self.settings.machine_type, self.settings.cpu or spec.cpus,
                                   self.settings.memory or spec.memory_mb, spec.name).cpus
        if self._quota_checked and cpus <= self._largest_cpus:
            return
        self._quota_checked, self._largest_cpus = True, max(cpus, self._largest_cpus)
        region = self.settings.default_region
        try:
            quotas = region_quotas(self._credentials, str(self._project), region)
        except gexc.GoogleAPICallError:  # no right to read quotas: the run goes on, back-pressure still works
            return
        room, metric = quota_limit(quotas, self._largest_cpus, self.settings.external_ip)
        if metric and room == 0:
            raise UserError(f"GCP quota {metric} in {region} has no room for one more VM of {self._largest_cpus} vCPUs "
                            f"({describe_quotas(quotas)}); free some, raise the quota (IAM & Admin > Quotas)"
                            + (", or set external_ip: false" if metric == "IN_USE_ADDRESSES" else ""))
        if metric:
            self.default_provider_limit = room

    # -- provider protocol ---------------------------------------------------------------
    def check(self, spec: SandboxSpec) -> None:
        """Before the run: fields it can honour, an image to run, credentials, a project, the right to list VMs.
        Users are `docker exec -u`, phase networks `docker network connect/disconnect`, storage_mb the boot
        disk's size; sidecars, GPUs and allowlists (no egress filter on the VM) are refused."""
        from google.api_core import exceptions as gexc

        common_refusals(spec, "gcp", switch_network=True)
        if not (self.settings.image or spec.image or spec.build_context):
            raise UserError(f"task '{spec.name}' names no image and has no environment/Dockerfile; "
                            "pass one with --env-params '{\"image\": \"NAME\"}'")
        instances, project = self._connect()
        self.machine_type_for(spec)  # refused here, in one line, when no machine type fits the task
        if self._quota_checked and self._listed:
            self._check_quotas(spec)
            return
        try:
            next(iter(instances.aggregated_list(request={"project": project, "max_results": 1,
                                                         "filter": labels_filter({"agentcompass": "1"})})), None)
        except gexc.GoogleAPICallError as exc:
            raise UserError(f"GCP project '{project}' refused to list VMs ({one_line(exc)[:200]}); {ROLES_HINT}") from exc
        self._listed = True
        self._check_quotas(spec)

    def open(self, spec: SandboxSpec) -> "GcpSandbox":
        instances, project = self._connect()
        s = self.settings
        name = instance_name(spec.name)
        key = self._ssh_key()
        zones = list(dict.fromkeys([s.zone, *s.zones]))
        full = []
        try:
            for zone in zones:
                with self._lock:
                    self._booting[name] = zone
                if self._insert(instances, project, zone, name, spec, key):
                    box = GcpSandbox(self, instances, project, zone, name, spec, key)
                    box.start()
                    return box
                full.append(zone)
        finally:
            with self._lock:
                self._booting.pop(name, None)
        raise InfraError(f"no capacity for {self.machine_type_for(spec)} in zones {', '.join(full)}; add zones with "
                         "--env-params '{\"zones\": [...]}' or try later")

    def _insert(self, instances: Any, project: str, zone: str, name: str, spec: SandboxSpec, key: EphemeralKey) -> bool:
        """Insert the VM in `zone` and wait for it; False when the zone is out of capacity."""
        from google.api_core import exceptions as gexc
        from google.cloud import compute_v1

        timeout = self.settings.operation_timeout_s
        request_id = str(uuid.uuid4())  # kept while a call is retried: the same request, never a second VM
        for _ in range(3):
            try:
                operation = instances.insert(request=compute_v1.InsertInstanceRequest(
                    project=project, zone=zone, request_id=request_id,
                    instance_resource=self.instance_resource(zone, name, spec, key)))
            except gexc.Conflict:
                # The name is this trial's: a killed earlier run of the same run name left it behind.
                delete_instance(instances, project, zone, name, timeout)
                request_id = str(uuid.uuid4())
                continue
            except gexc.GoogleAPICallError as exc:
                if insert_failure(exc, f"creating VM {name} in {zone}") == "full":
                    return False
                continue
            try:
                wait_for(operation, timeout, self.aborting)
                return True
            except gexc.GoogleAPICallError as exc:  # the operation failed: no VM was made
                if insert_failure(exc, f"creating VM {name} in {zone}") == "full":
                    return False
                request_id = str(uuid.uuid4())  # the failed operation's id would only replay its failure
            except InfraError:  # interrupted or too slow: the VM may still appear
                if name not in self.delete_requested:
                    with contextlib.suppress(Exception):
                        delete_instance(instances, project, zone, name, timeout)
                raise
        raise InfraError(f"creating VM {name} in {zone}: GCP kept failing")

    def instance_resource(self, zone: str, name: str, spec: SandboxSpec, key: EphemeralKey) -> Any:
        from google.cloud import compute_v1

        s = self.settings
        lifetime = int(s.timeout_s or (spec.lifetime_s or DEFAULT_LIFETIME_S) + s.boot_timeout_s)
        labels = {label_key(k): label_value(v) for k, v in {**s.labels, **spec.labels}.items()}
        scheduling = compute_v1.Scheduling(max_run_duration=compute_v1.Duration(seconds=max(lifetime, 30)),
                                           instance_termination_action="DELETE", automatic_restart=False,
                                           on_host_maintenance="TERMINATE")
        if s.spot:
            scheduling.provisioning_model = "SPOT"
        network = s.git_network or s.network
        interface = compute_v1.NetworkInterface(
            network=network if "/" in network else f"global/networks/{network}",
            access_configs=[compute_v1.AccessConfig(name="External NAT", type_="ONE_TO_ONE_NAT")] if s.external_ip else [])
        if s.subnetwork:
            region = s.region or zone.rsplit("-", 1)[0]
            interface.subnetwork = s.subnetwork if "/" in s.subnetwork else f"regions/{region}/subnetworks/{s.subnetwork}"
        if self._ssh_user:  # OS Login: the key is in the account's profile, metadata keys would be ignored
            metadata = {"enable-oslogin": "TRUE"}
        else:
            metadata = {"ssh-keys": f"{s.ssh_user}:{key.public_line}", "enable-oslogin": "FALSE",
                        "block-project-ssh-keys": "TRUE"}
        metadata["startup-script"] = startup_script(name, spec, s)
        machine_type = self.machine_type_for(spec) if self._sizing is not None else s.machine_type
        resource = compute_v1.Instance(
            name=name, machine_type=f"zones/{zone}/machineTypes/{machine_type}", labels=labels,
            disks=[compute_v1.AttachedDisk(boot=True, auto_delete=True, initialize_params=compute_v1.AttachedDiskInitializeParams(
                source_image=f"projects/{s.vm_image_project}/global/images/family/{s.vm_image_family}",
                disk_size_gb=disk_gb(s.disk_gb, spec.storage_mb)))],
            network_interfaces=[interface], scheduling=scheduling,
            metadata=compute_v1.Metadata(items=[compute_v1.Items(key=k, value=v) for k, v in metadata.items()]),
            tags=compute_v1.Tags(items=s.network_tags))
        if named_account(s.service_account):  # else none: the VM's metadata server hands out no token at all
            resource.service_accounts = [compute_v1.ServiceAccount(email=s.service_account,
                                                                   scopes=list(s.service_account_scopes))]
        return resource

    def cleanup(self, run_name: str | None = None) -> int:
        """Delete the VMs a killed run and the Batch jobs a killed `eval` left behind (labelled agentcompass=1
        [and run=NAME]); returns how many."""
        from agentcompass.providers.gcp.batch import BatchJobs

        instances, project = self._connect()
        labels = {"agentcompass": "1", **({"run": label_value(run_name)} if run_name else {})}
        wanted = labels_filter(labels)
        deleted = 0
        for zone, scoped in instances.aggregated_list(request={"project": project, "filter": wanted}):
            for instance in scoped.instances:
                if delete_instance(instances, project, zone.rpartition("/")[2], instance.name,
                                   self.settings.operation_timeout_s):
                    deleted += 1
        try:
            from google.cloud import batch_v1
        except ImportError:  # no Batch SDK (a partial install): VMs only, as `eval` on gcp cannot run here either
            return deleted
        jobs = BatchJobs(batch_v1.BatchServiceClient(credentials=self._credentials), project, self.settings.default_region)
        return deleted + jobs.delete_labelled(labels)
