"""A stand-in for the google-cloud Compute client that records every call and "boots" each VM
on this machine: the VM's SSH server is a real sshd on 127.0.0.1 (tests start it), the per-run
public key from the instance metadata goes into that sshd's authorized_keys (as GCE's guest
agent does), and the VM's start-up script runs here for real against the local Docker engine.
Deleting a VM removes its container, its built image and its state directory.

It is as strict as the service where the provider could go wrong: an unknown machine type, network or image
family is refused (404/400, the real google.api_core types), a container asking for more CPUs than the
machine type has fails to start as docker does on the VM, label keys and values follow GCP's rule, a list
filter of several expressions needs each one parenthesised, regional quotas (CPUS, IN_USE_ADDRESSES)
fail an insert's operation with QUOTA_EXCEEDED, a rate limit is a 403 rateLimitExceeded, org policies
(compute.vmExternalIpAccess, compute.requireOsLogin) are enforced, and a delete is a long-running
operation that completes a moment later. Each rule has a test showing the fake refuses what GCP refuses.

Every call is appended to `calls` and, when FAKE_GCP_LOG names a file, to that file as JSON
lines, so a test can read what a CLI subprocess asked of the SDK. Only what the provider uses
exists; the signatures match the real client's (tests/test_gcp_provider.py checks that).
`install()` puts the fake in place of compute_v1.InstancesClient and google.auth.default.

Longer than 400 lines because one fake of one service: Compute, OS Login and the VM boot share the recorded calls and the VMs' state.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
import signal
import subprocess
import threading
import time
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
QUOTA_ENV = "FAKE_GCP_QUOTA"  # regional quotas, "CPUS=24,IN_USE_ADDRESSES=8" (a new project's defaults)
RATE_LIMITED_ENV = "FAKE_GCP_RATE_LIMITED"  # the first N insert calls answer 403 rateLimitExceeded
NETWORKS_ENV = "FAKE_GCP_NETWORKS"  # the project's VPC networks (default: "default")
POLICIES_ENV = "FAKE_GCP_ORG_POLICIES"  # enforced constraints: compute.vmExternalIpAccess, compute.requireOsLogin
OSLOGIN_USER_ENV = "FAKE_GCP_OSLOGIN_USER"  # the POSIX user OS Login gives the account (tests: root)
DELETE_S = 0.5  # how long a delete operation runs before the VM is gone
DEFAULT_QUOTA = {"CPUS": 24.0, "IN_USE_ADDRESSES": 8.0}
IMAGE_FAMILIES = {("cos-cloud", "cos-stable"), ("debian-cloud", "debian-12")}
LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")  # GCP's label rule (keys start with a letter)
LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")
FILTER_TERM = r'labels\.([a-z][a-z0-9_-]*) = "([^"]*)"'
ADC_PROJECT = "adc-project"
VM_RULES, VM_EVENTS = "fake-iptables.rules", "fake-vm.events"  # the fake VM's firewall and what the boot did
NO_FIREWALL_ENV = "FAKE_GCP_NO_FIREWALL"  # when set: the VMs' iptables refuses every rule (a kernel without netfilter)


def machine_types() -> dict[str, tuple[int, int]]:
    """What Compute offers in every zone here: name -> (vCPUs, memory MiB)."""
    types = {"e2-micro": (2, 1024), "e2-small": (2, 2048), "e2-medium": (2, 4096)}
    for n in (2, 4, 8, 16, 32):
        types |= {f"e2-standard-{n}": (n, 4096 * n), f"e2-highmem-{n}": (n, 8192 * n), f"e2-highcpu-{n}": (n, 1024 * n)}
    for n in (2, 4, 8, 16, 32, 48, 64, 80, 96, 128):
        types |= {f"n2-standard-{n}": (n, 4096 * n), f"n2-highmem-{n}": (n, 8192 * n)}
    return types


def quota() -> dict[str, float]:
    pairs = [item.split("=") for item in os.environ.get(QUOTA_ENV, "").split(",") if item]
    return {**DEFAULT_QUOTA, **{k: float(v) for k, v in pairs}}


def policies() -> set[str]:
    return {p for p in os.environ.get(POLICIES_ENV, "").split(",") if p}


def region_usage(region: str) -> dict[str, float]:
    with _lock:
        mine = [vm for vm in vms.values() if vm.zone.rsplit("-", 1)[0] == region]
    return {"CPUS": float(sum(vm.cpus for vm in mine)),
            "IN_USE_ADDRESSES": float(sum(bool(vm.instance.network_interfaces[0].access_configs) for vm in mine))}


def labels_filter(text: str) -> dict[str, str]:
    """Compute's list filter: one expression, or several each in parentheses joined by AND (unparenthesised
    `a = "1" AND b = "2"` is refused with a 400, as googleapis/nodejs-compute#48 and google-cloud-go#11318 show)."""
    from google.api_core import exceptions

    single = re.fullmatch(FILTER_TERM, text)
    if single:
        return {single[1]: single[2]}
    terms = text.split(" AND ")
    found = [re.fullmatch(rf"\({FILTER_TERM}\)", term) for term in terms]
    if not all(found):
        raise exceptions.BadRequest(f"Invalid value for field 'filter': '{text}'. Invalid list filter expression.",
                                    errors=[{"reason": "invalid", "message": "Invalid list filter expression."}])
    return {m[1]: m[2] for m in found if m}
STATE_DIR = "/var/lib/agentcompass"

calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
vms: dict[str, "Vm"] = {}
deleting: dict[str, "Vm"] = {}  # VMs whose delete operation is still running
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


def vm_firewall(name: str) -> str:
    """The VM's own iptables, not this host's (a shared machine): a chain's rules are kept in a file in the VM's
    state dir, `-C` checks them as iptables does, and each call is written to the VM's events file beside the
    `docker run`s, so a test reads what the start-up script did to the firewall and in what order."""
    rules, events = f"{STATE_DIR}/{name}/{VM_RULES}", f"{STATE_DIR}/{name}/{VM_EVENTS}"
    refuse = "return 4; " if os.environ.get(NO_FIREWALL_ENV) else ""
    return ('iptables() { local a=("$@"); [ "$1" = -w ] && a=("${a[@]:1}"); '
            f'echo "iptables ${{a[*]}}" >> {events}; {refuse}case "${{a[0]}}" in '
            f'-N) grep -qx "chain ${{a[1]}}" {rules} 2>/dev/null && return 1; echo "chain ${{a[1]}}" >> {rules};; '
            f'-C) grep -qxF -- "${{a[*]:1}}" {rules} 2>/dev/null;; -I|-A) echo "${{a[*]:1}}" >> {rules};; esac; }}\n')


class Vm:
    def __init__(self, zone: str, instance: Any) -> None:
        self.zone, self.instance, self.name = zone, instance, instance.name
        self.cpus, self.memory_mb = machine_types()[instance.machine_type.rsplit("/", 1)[1]]
        items = {item.key: item.value for item in instance.metadata.items}
        if "compute.requireOsLogin" not in policies():  # with OS Login enforced, the guest ignores metadata keys
            user, _, key = items["ssh-keys"].partition(":")
            with open(os.environ[KEYS_ENV], "a", encoding="utf-8") as keys:
                keys.write(key + "\n")
        # The VM's own docker: a container asking for more CPUs than the machine type has fails to start (125),
        # as on GCE; one that fits runs here with at most this host's CPUs (the fake VM is bigger than the host).
        guard = (f'docker() {{ [ "$1" = run ] && echo "docker run" >> {STATE_DIR}/{self.name}/{VM_EVENTS}; '
                 'if [ "$1" = run ]; then local args=() a; for a in "$@"; do case "$a" in --cpus=*) '
                 f'if awk -v a="${{a#--cpus=}}" \'BEGIN {{ exit !(a > {self.cpus}) }}\'; then echo "docker: Error response '
                 f'from daemon: Range of CPUs is from 0.01 to {self.cpus}.00, as there are only {self.cpus} CPUs '
                 'available." >&2; return 125; fi; a="--cpus=$(awk -v a="${a#--cpus=}" -v h="$(nproc)" '
                 '\'BEGIN { print (a < h ? a : h) }\')";; esac; args+=("$a"); done; set -- "${args[@]}"; fi; '
                 'command docker "$@"; }\n')
        boot = (f"sleep {os.environ.get(BOOT_DELAY_ENV, '0')}\n{guard}{vm_firewall(self.name)}"  # a VM takes a while to boot
                f"{items['startup-script']}")
        self.boot = subprocess.Popen(["bash", "-c", boot], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    def destroy(self) -> None:
        self.start_destroying().wait()

    def start_destroying(self) -> subprocess.Popen:
        """Stop the VM and remove what it made, in a process of its own: as on GCE, a delete once accepted
        completes whether or not the client that asked waits for it (a client cut short by Ctrl-C, a worker's
        os._exit), so no booting VM lives on to start its container minutes later."""
        try:
            os.killpg(self.boot.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.boot.wait()
        script = (f"docker rm -f -v {self.name}; docker rmi -f agentcompass-task/{self.name}; "
                  f"rm -rf {STATE_DIR}/{self.name}")
        return subprocess.Popen(["sh", "-c", script], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)


class Operation:
    """An ExtendedOperation: `result` waits (concurrent.futures.TimeoutError past `timeout`) and raises the
    operation's error; `work`, when given, runs in the background (a delete: the VM goes a moment later)."""

    def __init__(self, error: Exception | None = None, work: Any = None) -> None:
        self.error = error
        self._done = threading.Event()
        if work is None:
            self._done.set()
        else:
            def run() -> None:
                time.sleep(DELETE_S)
                work()
                self._done.set()
            threading.Thread(target=run, daemon=True).start()

    def done(self, retry: Any = None) -> bool:
        return self._done.is_set()

    def result(self, timeout: Any = None, retry: Any = None, polling: Any = None) -> None:
        from concurrent.futures import TimeoutError as Pending

        record("ExtendedOperation.result", timeout=timeout, retry=retry, polling=polling)
        if not self._done.wait(timeout):
            raise Pending(f"operation not done within {timeout}s")
        if self.error is not None:
            raise self.error


def refuse_insert(request: Any) -> Exception | None:
    """What Compute refuses in an insert call itself (400/404, before any operation), else None."""
    from google.api_core import exceptions

    vm = request.instance_resource
    kind = vm.machine_type.rsplit("/", 1)[1]
    if kind not in machine_types():
        return exceptions.BadRequest(f"Invalid value for field 'resource.machineType': '{vm.machine_type}'. Machine type "
                                     f"with name '{kind}' does not exist in zone '{request.zone}'.",
                                     errors=[{"reason": "invalid", "message": "machine type does not exist"}])
    network = vm.network_interfaces[0].network.rsplit("/", 1)[1]
    if network not in os.environ.get(NETWORKS_ENV, "default").split(","):
        return exceptions.NotFound(f"The resource 'projects/{request.project}/global/networks/{network}' was not found",
                                   errors=[{"reason": "notFound", "message": "network not found"}])
    image = vm.disks[0].initialize_params.source_image  # projects/P/global/images/family/F
    parts = image.split("/")
    if (parts[1], parts[-1]) not in IMAGE_FAMILIES:
        return exceptions.NotFound(f"The resource '{image}' was not found", errors=[{"reason": "notFound"}])
    for key, value in vm.labels.items():
        if not LABEL_KEY.match(key) or not LABEL_VALUE.match(value):
            return exceptions.BadRequest(f"Invalid value for field 'resource.labels': '{key}'. Label key or value "
                                         "violates format constraints.", errors=[{"reason": "invalid"}])
    return None


def refuse_operation(request: Any, cpus: int) -> Exception | None:
    """What fails the insert's operation: an org policy, a regional quota."""
    from google.api_core import exceptions
    from google.cloud import compute_v1

    vm, region = request.instance_resource, request.zone.rsplit("-", 1)[0]
    external = bool(vm.network_interfaces[0].access_configs)
    if external and "compute.vmExternalIpAccess" in policies():
        message = (f"Constraint constraints/compute.vmExternalIpAccess violated for project {request.project}. Add "
                   f"instance projects/{request.project}/zones/{request.zone}/instances/{vm.name} to the constraint to "
                   "use external IP with it.")
        return exceptions.from_http_status(412, message, errors=[compute_v1.Errors(code="CONDITION_NOT_MET", message=message)])
    used, limits = region_usage(region), quota()
    for metric, wanted in (("CPUS", cpus), ("IN_USE_ADDRESSES", int(external))):
        if wanted and used[metric] + wanted > limits[metric]:
            message = f"Quota '{metric}' exceeded.  Limit: {limits[metric]} in region {region}."
            return exceptions.from_http_status(403, message, errors=[compute_v1.Errors(code="QUOTA_EXCEEDED", message=message)])
    return None


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
        inserts = sum(c[0] == "InstancesClient.insert" for c in calls)
        if inserts <= int(os.environ.get(RATE_LIMITED_ENV) or 0):
            raise exceptions.Forbidden("Rate Limit Exceeded", errors=[{"domain": "usageLimits", "reason": "rateLimitExceeded",
                                                                      "message": "Rate Limit Exceeded"}])
        refused = refuse_insert(request)
        if refused is not None:
            raise refused
        name = request.instance_resource.name
        with _lock:
            if name in vms or name in deleting:
                raise exceptions.Conflict(f"The resource 'projects/p/zones/{zone}/instances/{name}' already exists")
        failed = refuse_operation(request, machine_types()[request.instance_resource.machine_type.rsplit("/", 1)[1]][0])
        if failed is not None:
            return Operation(failed)
        with _lock:
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
            if vm is not None:
                deleting[vm.name] = vm  # still there (and its name taken) until the operation completes
        if vm is None:
            raise exceptions.NotFound(f"instance {request.instance}")

        destroying = vm.start_destroying()

        def gone() -> None:
            destroying.wait()
            with _lock:
                deleting.pop(vm.name, None)
        return Operation(work=gone)

    def aggregated_list(self, request: Any = None, *, project: str | None = None, retry: Any = None,
                        timeout: Any = None, metadata: Any = ()) -> Iterator[tuple[str, Any]]:
        from google.cloud import compute_v1

        record("InstancesClient.aggregated_list", request, project=project)
        if os.environ.get(DENIED_ENV):
            from google.api_core import exceptions

            raise exceptions.Forbidden("Required 'compute.instances.list' permission for 'projects/p'")
        wanted = labels_filter(request["filter"])
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


class NetworksClient:
    def __init__(self, *, credentials: Any = None, transport: Any = None, client_options: Any = None,
                 client_info: Any = None) -> None:
        record("NetworksClient", credentials=type(credentials).__name__)

    def get(self, request: Any = None, *, project: str | None = None, network: str | None = None, retry: Any = None,
            timeout: Any = None, metadata: Any = ()) -> Any:
        from google.api_core import exceptions
        from google.cloud import compute_v1

        record("NetworksClient.get", request, project=project, network=network)
        refuse_if_disabled("compute")
        if network not in os.environ.get(NETWORKS_ENV, "default").split(","):
            raise exceptions.NotFound(f"The resource 'projects/{project}/global/networks/{network}' was not found",
                                      errors=[{"reason": "notFound"}])
        return compute_v1.Network(name=network, auto_create_subnetworks=True)


class RegionsClient:
    def __init__(self, *, credentials: Any = None, transport: Any = None, client_options: Any = None,
                 client_info: Any = None) -> None:
        record("RegionsClient", credentials=type(credentials).__name__)

    def get(self, request: Any = None, *, project: str | None = None, region: str | None = None, retry: Any = None,
            timeout: Any = None, metadata: Any = ()) -> Any:
        from google.cloud import compute_v1

        record("RegionsClient.get", request, project=project, region=region)
        refuse_if_disabled("compute")
        used = region_usage(str(region))
        return compute_v1.Region(name=region, status="UP", quotas=[
            compute_v1.Quota(metric=metric, limit=limit, usage=used.get(metric, 0.0)) for metric, limit in quota().items()])


class MachineTypesClient:
    def __init__(self, *, credentials: Any = None, transport: Any = None, client_options: Any = None,
                 client_info: Any = None) -> None:
        record("MachineTypesClient", credentials=type(credentials).__name__)

    def get(self, request: Any = None, *, project: str | None = None, zone: str | None = None,
            machine_type: str | None = None, retry: Any = None, timeout: Any = None, metadata: Any = ()) -> Any:
        from google.api_core import exceptions
        from google.cloud import compute_v1

        record("MachineTypesClient.get", request, project=project, zone=zone, machine_type=machine_type)
        if machine_type not in machine_types():
            raise exceptions.NotFound(f"The resource 'projects/{project}/zones/{zone}/machineTypes/{machine_type}' was "
                                      "not found", errors=[{"reason": "notFound"}])
        cpus, memory = machine_types()[str(machine_type)]
        return compute_v1.MachineType(name=machine_type, guest_cpus=cpus, memory_mb=memory, zone=zone)


class OrgPolicyClient:
    """orgpolicy_v2: the effective policy of a constraint on the project."""

    def __init__(self, *, credentials: Any = None, transport: Any = None, client_options: Any = None,
                 client_info: Any = None) -> None:
        record("OrgPolicyClient", credentials=type(credentials).__name__)

    def get_effective_policy(self, request: Any = None, *, name: str | None = None, retry: Any = None,
                             timeout: Any = None, metadata: Any = ()) -> Any:
        from google.cloud import orgpolicy_v2

        record("OrgPolicyClient.get_effective_policy", request, name=name)
        constraint = str(name).rsplit("/", 1)[1]
        enforced = constraint in policies()
        return orgpolicy_v2.Policy(name=name, spec=orgpolicy_v2.PolicySpec(
            rules=[orgpolicy_v2.PolicySpec.PolicyRule(enforce=enforced)]))


class OsLoginServiceClient:
    """oslogin_v1: an imported key is what the VMs' guest lets in while OS Login is enforced."""

    def __init__(self, *, credentials: Any = None, transport: Any = None, client_options: Any = None,
                 client_info: Any = None) -> None:
        record("OsLoginServiceClient", credentials=type(credentials).__name__)

    def import_ssh_public_key(self, request: Any = None, *, parent: str | None = None, ssh_public_key: Any = None,
                              project_id: str | None = None, retry: Any = None, timeout: Any = None,
                              metadata: Any = ()) -> Any:
        from google.cloud import oslogin_v1

        record("OsLoginServiceClient.import_ssh_public_key", request, parent=parent, ssh_public_key=ssh_public_key,
               project_id=project_id)
        with open(os.environ[KEYS_ENV], "a", encoding="utf-8") as keys:
            keys.write(request.ssh_public_key.key + "\n")
        user = os.environ.get(OSLOGIN_USER_ENV, "root")
        return oslogin_v1.ImportSshPublicKeyResponse(login_profile=oslogin_v1.LoginProfile(
            name=request.parent, posix_accounts=[oslogin_v1.common.PosixAccount(username=user, primary=True)]))


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
    for name, fake in (("ZonesClient", ZonesClient), ("FirewallsClient", FirewallsClient),
                       ("RegionsClient", RegionsClient), ("MachineTypesClient", MachineTypesClient),
                       ("NetworksClient", NetworksClient)):
        REAL.setdefault(name, getattr(compute_v1, name))
        patcher.setattr(compute_v1, name, fake)
    for module, name, fake in (("google.cloud.orgpolicy_v2", "OrgPolicyClient", OrgPolicyClient),
                               ("google.cloud.oslogin_v1", "OsLoginServiceClient", OsLoginServiceClient)):
        import importlib

        real_module = importlib.import_module(module)
        REAL.setdefault(name, getattr(real_module, name))
        patcher.setattr(real_module, name, fake)
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
    deadline = time.monotonic() + 10  # deletes still running finish by themselves
    while deleting and time.monotonic() < deadline:
        time.sleep(0.05)


# -- GCP Batch ---------------------------------------------------------------------------------------
batch_states: list[tuple[str, dict[str, int]]] = []  # what successive get_job calls report (the last repeats)
RUN_TASKS_ENV = "FAKE_GCP_BATCH_RUN"  # when set: create_job runs each task's script here for real
TASK_DELAY_ENV = "FAKE_GCP_TASK_DELAY"  # seconds each task waits before its script (a VM coming up)
SLOW_GET_ENV = "FAKE_GCP_SLOW_GET_S"  # get_job takes this long; a signal cutting it short breaks that client
TASK_FAIL_ENV = "FAKE_GCP_TASK_FAIL"  # when set: every task's VM dies before its script runs (exit 1)


class RunningJob:
    """A job whose tasks "run" on this machine: the task script under bash with the job's environment and
    BATCH_TASK_INDEX, `parallelism` at once, each retried up to max_retry_count times, as Batch does."""

    def __init__(self, job: Any, job_id: str = "job") -> None:
        # The Batch VM's own firewall (never this host's) and `docker run`s, recorded as a trial VM's are (vm_firewall):
        # in STATE_DIR/<job id>, so a test reads what each task did to the firewall before its container.
        self.state = Path(STATE_DIR) / job_id
        self.state.mkdir(parents=True, exist_ok=True)
        # A runner container's privileged helper (`docker run --privileged ... -c RULE`) runs RULE here, against the
        # fake firewall: never a privileged container with this host's network.
        self.prelude = (vm_firewall(job_id) + f'docker() {{ [ "$1" = run ] && echo "docker $*" >> {self.state}/{VM_EVENTS}; '
                        'case " $* " in *" --privileged "*) eval "${@: -1}"; return;; esac; command docker "$@"; }\n')
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
                script = f"sleep {os.environ.get(TASK_DELAY_ENV, '0')}\n{dies}{self.prelude}{self.script}"
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
    broken = False

    def _hang_if_broken(self) -> None:
        if self.broken:
            time.sleep(3600)

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
            running[created.name] = RunningJob(request.job, request.job_id)
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
        self._hang_if_broken()
        try:
            time.sleep(float(os.environ.get(SLOW_GET_ENV) or 0))
        except KeyboardInterrupt:  # a call cut short: this client's connection hangs from now on, as a real one can
            self.broken = True
            raise
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
        self._hang_if_broken()
        if str(name) in running:
            running.pop(str(name)).cancel()
        if self.jobs.pop(str(name), None) is None:
            raise exceptions.NotFound(f"job {name}")
        return None
