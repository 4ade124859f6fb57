"""What a trial's pod is: its name and labels in the alphabets Kubernetes accepts, and its manifest (the task's
image, resources as requests and limits, the settings' pull secrets and service account, compose sidecars as
more containers of the pod), built from the client's own models so that only valid fields can be sent."""

from __future__ import annotations

import hashlib
import re
from typing import TYPE_CHECKING

from agentcompass.core.sandbox import SandboxSpec
from agentcompass.providers.kubernetes.settings import KubernetesSettings

if TYPE_CHECKING:
    from kubernetes.client import V1Container, V1NetworkPolicy, V1Pod

MAX_LABEL = 63  # a DNS-1123 label (a pod name that is also its hostname) and a label value
NOT_NAME = re.compile(r"[^a-z0-9-]+")
NOT_VALUE = re.compile(r"[^A-Za-z0-9_.-]+")
VALUE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
DEFAULT_LIFETIME_S = 2 * 3600
# The keep-alive as the container's command or its arguments (docker's KEEP_ALIVE): a shell whose child
# sleeps, so TERM ends it at once and the pod's deletion is quick.
KEEP_ALIVE = ["/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done"]
EGRESS_LABEL = "agentcompass.io/egress"  # which of the namespace's no-egress NetworkPolicies selects the pod
NO_EGRESS_POLICY = "agentcompass-no-egress"
TRIAL_CONTAINER = "trial"


def hashed(text: str, safe: str, limit: int) -> str:
    """`safe` when it is `text` unchanged and short enough; else cut, ending in a hash of the original,
    so two different names never become the same one."""
    if safe == text and len(safe) <= limit:
        return safe
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    return f"{safe[: limit - len(digest) - 1].strip('-_.')}-{digest}".strip("-")


def pod_name(name: str) -> str:
    """A DNS-1123 label (lowercase letters, digits, '-', at most 63, alphanumeric at both ends), unique per trial."""
    safe = NOT_NAME.sub("-", name.lower()).strip("-") or "trial"
    return hashed(name, safe, MAX_LABEL)


def label_value(text: str) -> str:
    safe = NOT_VALUE.sub("-", text).strip("-_.")
    return hashed(text, safe, MAX_LABEL) if safe else hashlib.sha256(text.encode()).hexdigest()[:12]


def egress_class(settings: KubernetesSettings) -> str:
    """The label value (and policy name suffix) of no-internet pods: `none`, or `gw-HASH` where the gateway's
    address is allowed. Policies add up, so each pod is selected by exactly one: runs allowing different
    addresses never widen each other's pods."""
    cidr = settings.gateway_egress_cidr
    return f"gw-{hashlib.sha256(cidr.encode()).hexdigest()[:10]}" if cidr else "none"


def policy_name(settings: KubernetesSettings) -> str:
    kind = egress_class(settings)
    return NO_EGRESS_POLICY if kind == "none" else f"{NO_EGRESS_POLICY}-{kind}"


def pod_labels(spec: SandboxSpec, egress: str | None) -> dict[str, str]:
    """The trial's labels (agentcompass=1, run, trial: what `cleanup` selects on) as valid label values, and the
    no-internet class (`egress`) its NetworkPolicy selects."""
    labels = {key: label_value(value) for key, value in spec.labels.items() if key and re.fullmatch(r"[A-Za-z0-9_.-]{1,63}", key)}
    if egress:
        labels[EGRESS_LABEL] = egress
    return labels


def quantities(cpus: float | None, memory_mb: int | None, gpus: int, storage_mb: int | None,
               gpu_resource: str) -> dict[str, str]:
    out: dict[str, str] = {}
    if cpus:
        out["cpu"] = f"{int(round(cpus * 1000))}m"
    if memory_mb:
        out["memory"] = f"{int(memory_mb)}Mi"
    if gpus:
        out[gpu_resource] = str(gpus)
    if storage_mb:
        out["ephemeral-storage"] = f"{int(storage_mb)}Mi"
    return out


def trial_container(spec: SandboxSpec, settings: KubernetesSettings, image: str) -> "V1Container":
    from kubernetes import client

    cpus, memory = settings.cpu or spec.cpus, settings.memory or spec.memory_mb
    # Requests equal to the limits (a Guaranteed pod where all are set): what docker's caps give, so a task gets
    # the same CPU and memory on every env; a cpu_request alone reserves without capping, as on Modal.
    limits = quantities(cpus, memory, spec.gpus, spec.storage_mb, settings.gpu_resource)
    requests = dict(limits)
    if "cpu" not in requests and spec.cpu_request:
        requests["cpu"] = f"{int(round(spec.cpu_request * 1000))}m"
    env = {**spec.env, **settings.env_variables}
    keep_alive = {"args": KEEP_ALIVE} if spec.image_entrypoint else {"command": KEEP_ALIVE}
    return client.V1Container(
        name=TRIAL_CONTAINER, image=image, image_pull_policy=settings.image_pull_policy,
        working_dir=spec.workdir or None, env=[client.V1EnvVar(name=k, value=v) for k, v in env.items()] or None,
        resources=client.V1ResourceRequirements(limits=limits or None, requests=requests or None),
        **keep_alive)


def sidecars(spec: SandboxSpec, settings: KubernetesSettings) -> list["V1Container"]:
    """The compose services as containers of the pod: they share its network namespace, so each is reached at
    localhost, and the pod's host aliases give their service names the same address."""
    from kubernetes import client

    out = []
    for service in spec.compose.services if spec.compose else []:
        if not service.image:  # built from a Dockerfile: refused where the task needs it (provider.check)
            continue
        out.append(client.V1Container(
            name=pod_name(service.name), image=service.image, command=service.entrypoint, args=service.command,
            working_dir=service.workdir, env=[client.V1EnvVar(name=k, value=v) for k, v in service.env.items()] or None,
            resources=client.V1ResourceRequirements(limits=quantities(service.cpus, service.memory_mb, 0, None, "") or None)))
    return out


def pod_manifest(spec: SandboxSpec, settings: KubernetesSettings, image: str, name: str, owner: str,
                 egress: str | None) -> "V1Pod":
    from kubernetes import client

    lifetime = int(settings.lifetime or spec.lifetime_s or DEFAULT_LIFETIME_S)
    services = sidecars(spec, settings)
    aliases = ([client.V1HostAlias(ip="127.0.0.1", hostnames=[s.name for s in spec.compose.services if s.image])]
               if services and spec.compose else None)
    return client.V1Pod(
        api_version="v1", kind="Pod",
        metadata=client.V1ObjectMeta(name=name, labels=pod_labels(spec, egress),
                                     annotations={"agentcompass.io/owner": owner, "agentcompass.io/trial": spec.name}),
        spec=client.V1PodSpec(
            containers=[trial_container(spec, settings, image), *services],
            restart_policy="Never",  # a container that dies is a lost sandbox, never silently a fresh one
            active_deadline_seconds=lifetime,  # the cluster ends the pod past its lifetime, even if this run is gone
            termination_grace_period_seconds=5,
            automount_service_account_token=settings.mount_service_account,
            service_account_name=settings.service_account,
            image_pull_secrets=[client.V1LocalObjectReference(name=n) for n in settings.image_pull_secrets] or None,
            enable_service_links=False,  # no variables naming the namespace's services in the agent's environment
            host_aliases=aliases,
            node_selector=settings.node_selector or None,
            tolerations=[client.V1Toleration(**t) for t in settings.tolerations] or None))


def no_egress_policy(settings: KubernetesSettings) -> "V1NetworkPolicy":
    """Selects the namespace's no-internet pods and allows them no egress at all (DNS included), but for the
    gateway's address when one is set."""
    from kubernetes import client

    egress = None
    if settings.gateway_egress_cidr:
        egress = [client.V1NetworkPolicyEgressRule(to=[client.V1NetworkPolicyPeer(
            ip_block=client.V1IPBlock(cidr=settings.gateway_egress_cidr))])]
    return client.V1NetworkPolicy(
        api_version="networking.k8s.io/v1", kind="NetworkPolicy",
        metadata=client.V1ObjectMeta(name=policy_name(settings), labels={"agentcompass": "1"}),
        spec=client.V1NetworkPolicySpec(pod_selector=client.V1LabelSelector(match_labels={EGRESS_LABEL: egress_class(settings)}),
                                        policy_types=["Egress"], egress=egress))
