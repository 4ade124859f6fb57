"""The gcp provider: each trial on its own Compute Engine VM, the task container inside it.

Per trial a VM is inserted (labels agentcompass/run/trial, an idempotent request id, a
server-side time-to-live: `scheduling.max_run_duration` with termination action DELETE, so a
VM deletes itself if the orchestrator dies). Its start-up script pulls the task image (or
builds the task's Dockerfile, whose context arrives over SSH) and starts the task container
with its limits and network policy. Commands then run as `docker exec` over SSH with a per-run
ephemeral key injected through instance metadata; files move as tar streams over the same
channel. A zone out of capacity tries the next configured zone. Close deletes the VM and waits.

Project: environments.gcp.project_id (private --config) > GOOGLE_CLOUD_PROJECT > the project of
Application Default Credentials (or of `credentials_file`). The google-cloud SDK is imported
inside the methods that use it, never when the CLI starts.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import tarfile
import tempfile
import threading
import time
import uuid
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import AliasChoices, Field

from agentcompass.core.errors import InfraError, UserError
from agentcompass.providers.gcp.api import (ROLES_HINT, SCOPES, delete_instance, gcp_credentials, insert_failure,
                                            wait_for)
from agentcompass.providers.gcp.batch import BatchSettings
from agentcompass.providers.gcp.vm import (  # noqa: F401  (names and labels: re-exported for gcp_eval and tests)
    STATE_DIR, disk_gb, instance_name, label_key, label_value, labels_filter, startup_script,
)
from agentcompass.providers.modal.provider import DOWNLOAD_SCRIPT, MISSING_EXIT  # the same tar-over-exec download
from agentcompass.providers.remote import EXEC_MARK, KILL_MARKED, extract_renamed, one_line, upload_archive
from agentcompass.providers.gcp.ssh import EphemeralKey, SshHost
from agentcompass.core.sandbox import DEFAULT_OUTPUT_CAP, ExecResult, SandboxSpec, cap_output, common_refusals
from agentcompass.core.schema import Positive, PositiveInt, Strict

DEFAULT_LIFETIME_S = 2 * 3600  # when neither the settings nor the task say how long a VM may live


class GcpProvider:
    name = "gcp"
    extra, extra_modules = "gcp", ("google.cloud.compute_v1", "paramiko")

    class Settings(Strict):
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
        # The VMs' service account ("default": the project's Compute default, with the cloud-platform scope, so
        # a VM can pull private Artifact Registry images); null: none.
        service_account: str | None = "default"
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

    @classmethod
    def readiness(cls, settings: dict[str, Any], live: bool, config_source: str = "") -> Any:
        """`env check gcp`: sources in use, then (live) credentials, APIs, the SSH firewall rule, the bucket."""
        from agentcompass.providers.gcp.setup import gcp_readiness

        return gcp_readiness(cls.Settings(**settings), live, config_source)

    def interrupt(self) -> None:
        """The run is ending (Ctrl-C, SIGTERM; the scheduler calls this): stop waiting for VMs to come up."""
        self.aborting.set()

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
        for zone in zones:
            if self._insert(instances, project, zone, name, spec, key):
                box = GcpSandbox(self, instances, project, zone, name, spec, key)
                box.start()
                return box
            full.append(zone)
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
        if s.service_account and s.service_account.lower() != "none":  # "default": the Compute default account
            resource.service_accounts = [compute_v1.ServiceAccount(email=s.service_account, scopes=SCOPES)]
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


class GcpSandbox:
    def __init__(self, provider: GcpProvider, instances: Any, project: str, zone: str, name: str,
                 spec: SandboxSpec, key: EphemeralKey) -> None:
        self.provider, self.instances, self.project, self.zone = provider, instances, project, zone
        self.id = name
        self.spec = spec
        self.settings = provider.settings
        self.root = "sudo " if self.settings.sudo else ""
        self.docker = f"{self.root}docker"
        self.has_task_image = self.settings.image is None
        self.ssh: SshHost | None = None
        self._key = key
        self._closed = False
        self._close_lock = threading.Lock()

    def attach_hint(self) -> str:
        return (f"gcloud compute ssh {self.id} --zone {self.zone} --project {self.project} -- "
                f"{self.docker} exec -it {self.id} bash   (delete it with: agentcompass cleanup --env gcp)")

    def start(self) -> None:
        """Connect over SSH, send the build context when there is one, wait for the task container."""
        s = self.settings
        deadline = time.monotonic() + s.boot_timeout_s
        try:
            instance = self.instances.get(project=self.project, zone=self.zone, instance=self.id)
            interface = instance.network_interfaces[0]
            address = interface.access_configs[0].nat_i_p if s.external_ip and interface.access_configs else interface.network_i_p
            self.ssh = SshHost(address, s.ssh_port, self.provider.ssh_user, self._key)
            self.ssh.connect(deadline, self.provider.aborting)
            state = f"{STATE_DIR}/{self.id}"
            if not (s.image or self.spec.image) and self.spec.build_context:
                with tempfile.TemporaryFile() as spool:
                    with tarfile.open(fileobj=spool, mode="w") as archive:
                        archive.add(str(self.spec.build_context), arcname=".")
                    spool.seek(0)
                    self._must(f"{self.root}mkdir -p {state} && {self.root}tee {state}/context.part >/dev/null && "
                               f"{self.root}mv {state}/context.part {state}/context.tar", stdin=spool)
            # Wait in short rounds (no "done" yet: ask again), so an interrupt is noticed within seconds.
            wait = f"for i in 1 2 3 4 5; do [ -e {state}/status ] && echo done && exit $(cat {state}/status); sleep 1; done"
            while b"done" not in (done := self.ssh.run(f"{self.root}sh -c {shlex.quote(wait)}", timeout=30)).stdout:
                if self.provider.aborting.is_set():
                    raise InfraError("interrupted")
                if time.monotonic() > deadline:
                    break
            if b"done" not in done.stdout or done.exit_code != 0:
                log = self.ssh.run(f"{self.root}tail -c 2000 {state}/startup.log").stdout.decode(errors="replace")
                why = f"failed ({done.exit_code})" if b"done" in done.stdout else f"took over {s.boot_timeout_s:.0f}s"
                raise InfraError(f"VM {self.id}: the task container's start-up {why}: {one_line(log)[-400:]}")
            if "public" in self.spec.network_modes and not self.spec.allow_internet:
                self.set_network("no-network")  # started on the bridge so that a later phase can join it
        except BaseException:
            self.close()
            raise

    def _must(self, command: str, **kwargs: Any) -> Any:
        assert self.ssh is not None
        done = self.ssh.run(command, **kwargs)
        if done.exit_code != 0:
            raise InfraError(f"VM {self.id}: `{command[:80]}` failed ({done.exit_code}): "
                             f"{one_line(done.stderr.decode(errors='replace'))[:300]}")
        return done

    def _ssh(self) -> SshHost:
        if self._closed or self.ssh is None:
            raise InfraError("sandbox is closed")
        return self.ssh

    # -- exec ----------------------------------------------------------------------------
    def exec(self, cmd: str, *, cwd: str | None = None, env: dict[str, str] | None = None,
             timeout: float | None = None, user: str | None = None) -> ExecResult:
        mark = uuid.uuid4().hex
        q = shlex.quote
        variables = " ".join(f"-e {q(f'{k}={v}')}" for k, v in {**(env or {}), EXEC_MARK: mark}.items())
        as_user = f"-u {q(user)} " if user else ""
        command = (f"{self.docker} exec {as_user}-w {q(cwd or self.spec.workdir)} {variables} {self.id} "
                   f"{q(self.settings.shell)} -c {q(cmd)}")
        start = time.monotonic()
        kill = f"{self.docker} exec {self.id} /bin/sh -c {q(KILL_MARKED)} {q(f'{EXEC_MARK}={mark}')}"
        cap = self.settings.output_cap_bytes
        done = self._ssh().run(command, timeout=timeout, keep=cap + 1,
                               on_timeout=lambda: self._ssh().run(kill, timeout=60))
        return ExecResult(done.exit_code, cap_output(done.stdout, cap), cap_output(done.stderr, cap), done.timed_out,
                          time.monotonic() - start)

    def set_network(self, mode: str, allowed_hosts: tuple[str, ...] = ()) -> None:  # no allowlists here (refused)
        """A phase's network (Harbor's network_mode): the task container on the VM's bridge, or on none at all."""
        inspect = self._must(f"{self.docker} inspect -f '{{{{json .NetworkSettings.Networks}}}}' {self.id}")
        attached, wanted = "bridge" in (json.loads(inspect.stdout or b"null") or {}), mode == "public"
        if wanted != attached:
            self._must(f"{self.docker} network {'connect' if wanted else 'disconnect'} bridge {self.id}")

    # -- files ---------------------------------------------------------------------------
    def upload(self, local: Path, remote: str) -> None:
        """Copy a file or a directory's contents to `remote`, creating parent directories."""
        with tempfile.SpooledTemporaryFile(max_size=16 * 1024 * 1024) as spool:
            upload_archive(local, remote, spool)
            self._must(f"{self.docker} exec -i {self.id} tar -xf - -C /", stdin=spool)

    def download(self, remote: str, local: Path) -> None:
        """Copy `remote` (a file, or a directory's contents) to `local`; FileNotFoundError when it is missing."""
        q = shlex.quote
        with tempfile.SpooledTemporaryFile(max_size=16 * 1024 * 1024) as spool:
            done = self._ssh().run(f"{self.docker} exec {self.id} /bin/sh -c {q(DOWNLOAD_SCRIPT)} download "
                                   f"{q(str(PurePosixPath(remote)))}", stdout=spool)
            if done.exit_code == MISSING_EXIT:
                raise FileNotFoundError(remote)
            if done.exit_code != 0:
                raise InfraError(f"download of {remote} failed (exit {done.exit_code}): "
                                 f"{one_line(done.stderr.decode(errors='replace'))[:300]}")
            spool.seek(0)
            with tarfile.open(fileobj=spool, mode="r") as archive:
                extract_renamed(archive, local)

    def close(self) -> None:
        """Delete the VM and wait until it is gone. Safe to call twice, from any thread."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        if self.ssh is not None:
            self.ssh.close()
        delete_instance(self.instances, self.project, self.zone, self.id, self.settings.operation_timeout_s)
