"""A stand-in for the google-cloud Compute client that records every call and "boots" each VM
on this machine: the VM's SSH server is a real sshd on 127.0.0.1 (tests start it), the per-run
public key from the instance metadata goes into that sshd's authorized_keys (as GCE's guest
agent does), and the VM's start-up script runs here for real against the local Docker engine.
Deleting a VM removes its container, its built image and its state directory.

Every call is appended to `calls` and, when FAKE_GCP_LOG names a file, to that file as JSON
lines, so a test can read what a CLI subprocess asked of the SDK. Only what the provider uses
exists; the signatures match the real client's (tests/test_gcp_provider.py checks that).
`install()` puts the fake in place of compute_v1.InstancesClient and google.auth.default.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
from typing import Any, Iterator

from fake_sdk import jsonable

LOG_ENV = "FAKE_GCP_LOG"
KEYS_ENV = "FAKE_GCP_AUTHORIZED_KEYS"  # the test sshd's authorized_keys file
EXHAUSTED_ENV = "FAKE_GCP_EXHAUSTED"  # comma-separated zones out of capacity
DENIED_ENV = "FAKE_GCP_DENIED"  # when set: listing and inserting VMs are refused for want of a permission
DENIED_INSERT_ENV = "FAKE_GCP_DENIED_INSERT"  # when set: only inserts are refused
FLAKY_ENV = "FAKE_GCP_FLAKY"  # when set: the first insert operation fails with a transient error
BOOT_DELAY_ENV = "FAKE_GCP_BOOT_DELAY"  # seconds each VM takes to boot (default 0)
NO_ADC_ENV = "FAKE_GCP_NO_ADC"  # when set: google.auth.default finds no credentials
DISABLED_APIS_ENV = "FAKE_GCP_DISABLED_APIS"  # comma-separated (compute, batch): calls answer SERVICE_DISABLED
FIREWALL_ENV = "FAKE_GCP_FIREWALL"  # when set: the project has a rule letting tcp:22 reach agentcompass-ssh VMs
ADC_PROJECT = "adc-project"
STATE_DIR = "/var/lib/agentcompass"

calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
vms: dict[str, "Vm"] = {}
_lock = threading.Lock()


def describe_object(value: Any) -> Any:
    """A google-cloud message as its dict, as the client library prints it."""
    to_dict = getattr(type(value), "to_dict", None)
    return to_dict(value) if callable(to_dict) else str(value)


def record(call: str, /, *args: Any, **kwargs: Any) -> None:
    with _lock:
        calls.append((call, args, kwargs))
        log = os.environ.get(LOG_ENV)
        if log:
            with open(log, "a", encoding="utf-8") as handle:
                handle.write(json.dumps({"call": call, "args": jsonable(args, describe_object), "kwargs": jsonable(kwargs, describe_object)}) + "\n")


def reset() -> None:
    with _lock:
        calls.clear()


class Vm:
    def __init__(self, zone: str, instance: Any) -> None:
        self.zone, self.instance, self.name = zone, instance, instance.name
        items = {item.key: item.value for item in instance.metadata.items}
        user, _, key = items["ssh-keys"].partition(":")
        with open(os.environ[KEYS_ENV], "a", encoding="utf-8") as keys:
            keys.write(key + "\n")
        boot = f"sleep {os.environ.get(BOOT_DELAY_ENV, '0')}\n{items['startup-script']}"  # a VM takes a while to boot
        self.boot = subprocess.Popen(["bash", "-c", boot], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    def destroy(self) -> None:
        try:
            os.killpg(self.boot.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.boot.wait()
        subprocess.run(["docker", "rm", "-f", "-v", self.name], capture_output=True)
        subprocess.run(["docker", "rmi", "-f", f"agentcompass-task/{self.name}"], capture_output=True)
        shutil.rmtree(f"{STATE_DIR}/{self.name}", ignore_errors=True)


class Operation:
    """An ExtendedOperation: `result` waits and raises the operation's error."""

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error

    def result(self, timeout: Any = None, retry: Any = None, polling: Any = None) -> None:
        record("ExtendedOperation.result", timeout=timeout, retry=retry, polling=polling)
        if self.error is not None:
            raise self.error


class InstancesClient:
    def __init__(self, *, credentials: Any = None, transport: Any = None, client_options: Any = None,
                 client_info: Any = None) -> None:
        record("InstancesClient", credentials=type(credentials).__name__)

    def insert(self, request: Any = None, *, project: str | None = None, zone: str | None = None,
               instance_resource: Any = None, retry: Any = None, timeout: Any = None, metadata: Any = ()) -> Operation:
        from google.api_core import exceptions
        from google.cloud import compute_v1

        record("InstancesClient.insert", request, project=project, zone=zone, instance_resource=instance_resource)
        zone = request.zone
        if os.environ.get(DENIED_ENV) or os.environ.get(DENIED_INSERT_ENV):
            raise exceptions.Forbidden("Required 'compute.instances.create' permission for 'projects/p'")
        if zone in os.environ.get(EXHAUSTED_ENV, "").split(","):
            message = f"The zone 'projects/{request.project}/zones/{zone}' does not have enough resources available."
            return Operation(exceptions.from_http_status(503, message, errors=[compute_v1.Errors(
                code="ZONE_RESOURCE_POOL_EXHAUSTED", message=message)]))
        if os.environ.get(FLAKY_ENV) and not any(c[0] == "InstancesClient.insert" for c in calls[:-1]):
            return Operation(exceptions.from_http_status(503, "Internal error. Please try again."))
        name = request.instance_resource.name
        with _lock:
            if name in vms:
                raise exceptions.Conflict(f"The resource 'projects/p/zones/{zone}/instances/{name}' already exists")
            vms[name] = Vm(zone, request.instance_resource)
        return Operation()

    def get(self, request: Any = None, *, project: str | None = None, zone: str | None = None,
            instance: str | None = None, retry: Any = None, timeout: Any = None, metadata: Any = ()) -> Any:
        from google.api_core import exceptions
        from google.cloud import compute_v1

        record("InstancesClient.get", request, project=project, zone=zone, instance=instance)
        vm = vms.get(str(instance))
        if vm is None:
            raise exceptions.NotFound(f"instance {instance}")
        found = compute_v1.Instance(vm.instance)
        found.network_interfaces[0].network_i_p = "127.0.0.1"
        if found.network_interfaces[0].access_configs:
            found.network_interfaces[0].access_configs[0].nat_i_p = "127.0.0.1"
        return found

    def delete(self, request: Any = None, *, project: str | None = None, zone: str | None = None,
               instance: str | None = None, retry: Any = None, timeout: Any = None, metadata: Any = ()) -> Operation:
        from google.api_core import exceptions

        record("InstancesClient.delete", request, project=project, zone=zone, instance=instance)
        with _lock:
            vm = vms.pop(request.instance, None)
        if vm is None:
            raise exceptions.NotFound(f"instance {request.instance}")
        vm.destroy()
        return Operation()

    def aggregated_list(self, request: Any = None, *, project: str | None = None, retry: Any = None,
                        timeout: Any = None, metadata: Any = ()) -> Iterator[tuple[str, Any]]:
        from google.cloud import compute_v1

        record("InstancesClient.aggregated_list", request, project=project)
        if os.environ.get(DENIED_ENV):
            from google.api_core import exceptions

            raise exceptions.Forbidden("Required 'compute.instances.list' permission for 'projects/p'")
        wanted = dict(clause.replace('"', "").replace("labels.", "").split(" = ")
                      for clause in request["filter"].split(" AND "))
        with _lock:
            found = [vm for vm in vms.values() if wanted.items() <= dict(vm.instance.labels).items()]
        zones = sorted({vm.zone for vm in found})
        return iter([(f"zones/{z}", compute_v1.InstancesScopedList(instances=[vm.instance for vm in found if vm.zone == z]))
                     for z in zones])


def refuse_if_disabled(api: str) -> None:
    from google.api_core import exceptions

    if api in os.environ.get(DISABLED_APIS_ENV, "").split(","):
        raise exceptions.Forbidden(f"{api}.googleapis.com has not been used in project {ADC_PROJECT} before or it is "
                                   "disabled. Enable it by visiting the console. [reason: SERVICE_DISABLED]")


class ZonesClient:
    def __init__(self, *, credentials: Any = None, transport: Any = None, client_options: Any = None,
                 client_info: Any = None) -> None:
        record("ZonesClient", credentials=type(credentials).__name__)

    def get(self, request: Any = None, *, project: str | None = None, zone: str | None = None, retry: Any = None,
            timeout: Any = None, metadata: Any = ()) -> Any:
        from google.cloud import compute_v1

        record("ZonesClient.get", request, project=project, zone=zone)
        refuse_if_disabled("compute")
        return compute_v1.Zone(name=zone, status="UP")


class FirewallsClient:
    def __init__(self, *, credentials: Any = None, transport: Any = None, client_options: Any = None,
                 client_info: Any = None) -> None:
        record("FirewallsClient", credentials=type(credentials).__name__)

    def list(self, request: Any = None, *, project: str | None = None, retry: Any = None, timeout: Any = None,
             metadata: Any = ()) -> Iterator[Any]:
        from google.cloud import compute_v1

        record("FirewallsClient.list", request, project=project)
        refuse_if_disabled("compute")
        network = f"https://www.googleapis.com/compute/v1/projects/{project}/global/networks/default"
        rules = [compute_v1.Firewall(name="default-allow-icmp", network=network, direction="INGRESS",
                                     allowed=[compute_v1.Allowed(I_p_protocol="icmp")])]
        if os.environ.get(FIREWALL_ENV):
            rules.append(compute_v1.Firewall(name="agentcompass-ssh", network=network, direction="INGRESS",
                                             allowed=[compute_v1.Allowed(I_p_protocol="tcp", ports=["22"])],
                                             target_tags=["agentcompass-ssh"]))
        return iter(rules)


def default(scopes: Any = None, request: Any = None, quota_project_id: Any = None, default_scopes: Any = None) -> Any:
    from google.auth import exceptions
    from google.auth.credentials import AnonymousCredentials

    record("google.auth.default", scopes=scopes)
    if os.environ.get(NO_ADC_ENV):
        raise exceptions.DefaultCredentialsError("Your default credentials were not found.")
    return AnonymousCredentials(), ADC_PROJECT


REAL: dict[str, Any] = {}  # the real client class and ADC function, for signature checks


def install_into(patcher: Any) -> None:
    """Put the fake in place with `patcher.setattr` (pytest's monkeypatch undoes it)."""
    import google.auth
    from google.cloud import compute_v1

    REAL.setdefault("InstancesClient", compute_v1.InstancesClient)
    REAL.setdefault("google.auth.default", google.auth.default)
    patcher.setattr(compute_v1, "InstancesClient", InstancesClient)
    for name, fake in (("ZonesClient", ZonesClient), ("FirewallsClient", FirewallsClient)):
        REAL.setdefault(name, getattr(compute_v1, name))
        patcher.setattr(compute_v1, name, fake)
    try:
        from google.cloud import batch_v1
    except ImportError:
        pass
    else:
        REAL.setdefault("BatchServiceClient", batch_v1.BatchServiceClient)
        patcher.setattr(batch_v1, "BatchServiceClient", BatchServiceClient)
    patcher.setattr(google.auth, "default", default)


def install() -> None:
    """For a CLI subprocess: a sitecustomize.py calls this."""
    install_into(type("Patcher", (), {"setattr": staticmethod(setattr)}))


def destroy_all() -> None:
    with _lock:
        leftovers = list(vms.values())
        vms.clear()
    for vm in leftovers:
        vm.destroy()


# -- GCP Batch ---------------------------------------------------------------------------------------
batch_states: list[tuple[str, dict[str, int]]] = []  # what successive get_job calls report (the last repeats)
RUN_TASKS_ENV = "FAKE_GCP_BATCH_RUN"  # when set: create_job runs each task's script here for real
TASK_DELAY_ENV = "FAKE_GCP_TASK_DELAY"  # seconds each task waits before its script (a VM coming up)
TASK_FAIL_ENV = "FAKE_GCP_TASK_FAIL"  # when set: every task's VM dies before its script runs (exit 1)


class RunningJob:
    """A job whose tasks "run" on this machine: the task script under bash with the job's environment and
    BATCH_TASK_INDEX, `parallelism` at once, each retried up to max_retry_count times, as Batch does."""

    def __init__(self, job: Any) -> None:
        group = job.task_groups[0]
        spec = group.task_spec
        runnable = spec.runnables[0]
        self.script = runnable.script.text if runnable.script.text else runnable.container.commands[-1]
        self.env = dict(spec.environment.variables)
        self.retries = spec.max_retry_count
        self.states = ["QUEUED"] * group.task_count
        self.semaphore = threading.Semaphore(max(1, group.parallelism))
        self.cancelled = threading.Event()
        self.procs: list[subprocess.Popen[str]] = []
        self.threads = [threading.Thread(target=self.run, args=(i,), daemon=True) for i in range(group.task_count)]
        for thread in self.threads:
            thread.start()

    def run(self, index: int) -> None:
        with self.semaphore:
            for _ in range(self.retries + 1):
                if self.cancelled.is_set():
                    return
                self.states[index] = "RUNNING"
                dies = "echo 'the VM was preempted' >&2; exit 1\n" if os.environ.get(TASK_FAIL_ENV) else ""
                script = f"sleep {os.environ.get(TASK_DELAY_ENV, '0')}\n{dies}{self.script}"
                proc = subprocess.Popen(["bash", "-c", script], env={**os.environ, **self.env, "BATCH_TASK_INDEX": str(index)},
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
                self.procs.append(proc)
                _, stderr = proc.communicate()
                if proc.returncode == 0:
                    self.states[index] = "SUCCEEDED"
                    return
                self.states[index] = f"FAILED:{stderr.strip()[-300:]}"

    def cancel(self) -> None:
        """Deleting a job stops its tasks (each task's process group is its own)."""
        self.cancelled.set()
        for proc in self.procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def status(self) -> tuple[str, dict[str, int], list[str]]:
        counts: dict[str, int] = {}
        for state in self.states:
            key = state.partition(":")[0]
            counts[key] = counts.get(key, 0) + 1
        failed = [s.partition(":")[2] for s in self.states if s.startswith("FAILED")]
        if counts.get("QUEUED") or counts.get("RUNNING"):
            return "RUNNING", counts, []
        return ("FAILED" if failed else "SUCCEEDED"), counts, failed


running: dict[str, RunningJob] = {}


class BatchServiceClient:
    jobs: dict[str, Any] = {}

    def __init__(self, *, credentials: Any = None, transport: Any = None, client_options: Any = None,
                 client_info: Any = None) -> None:
        record("BatchServiceClient", credentials=type(credentials).__name__)

    def create_job(self, request: Any = None, *, parent: str | None = None, job: Any = None, job_id: str | None = None,
                   retry: Any = None, timeout: Any = None, metadata: Any = ()) -> Any:
        from google.api_core import exceptions
        from google.cloud import batch_v1

        record("BatchServiceClient.create_job", request, parent=parent, job=job, job_id=job_id)
        created = batch_v1.Job(request.job)
        created.name = f"{request.parent}/jobs/{request.job_id}"
        if created.name in self.jobs:
            raise exceptions.AlreadyExists(f"job {created.name} already exists")
        self.jobs[created.name] = created
        if os.environ.get(RUN_TASKS_ENV):
            running[created.name] = RunningJob(request.job)
        return created

    def list_jobs(self, request: Any = None, *, parent: str | None = None, retry: Any = None, timeout: Any = None,
                  metadata: Any = ()) -> Iterator[Any]:
        record("BatchServiceClient.list_jobs", request, parent=parent)
        refuse_if_disabled("batch")
        return iter(list(self.jobs.values()))

    def get_job(self, request: Any = None, *, name: str | None = None, retry: Any = None, timeout: Any = None,
                metadata: Any = ()) -> Any:
        from google.api_core import exceptions
        from google.cloud import batch_v1

        record("BatchServiceClient.get_job", request, name=name)
        if name not in self.jobs:
            raise exceptions.NotFound(f"job {name}")
        failures: list[str] = []
        if str(name) in running:
            state, counts, failures = running[str(name)].status()
        else:
            state, counts = batch_states.pop(0) if len(batch_states) > 1 else batch_states[0]
        job = batch_v1.Job(self.jobs[str(name)])
        job.status = batch_v1.JobStatus(state=state, task_groups={"group0": batch_v1.JobStatus.TaskGroupStatus(counts=counts)})
        if failures:
            job.status.status_events = [batch_v1.StatusEvent(description=f"Task failed with exit code 1: {f}")
                                        for f in failures]
        elif state == "FAILED":
            job.status.status_events = [batch_v1.StatusEvent(description="Task state is updated from RUNNING to FAILED "
                                                                          "on zones/us-central1-a/instances/x with exit code 1.")]
        return job

    def delete_job(self, request: Any = None, *, name: str | None = None, retry: Any = None, timeout: Any = None,
                   metadata: Any = ()) -> Any:
        from google.api_core import exceptions

        record("BatchServiceClient.delete_job", request, name=name)
        if str(name) in running:
            running.pop(str(name)).cancel()
        if self.jobs.pop(str(name), None) is None:
            raise exceptions.NotFound(f"job {name}")
        return None
