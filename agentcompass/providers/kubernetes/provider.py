"""The kubernetes provider: each trial in its own pod, through the official Python client.

A pod runs the task's registry image (or the settings' run-wide one; a cluster builds no Dockerfile) with the
keep-alive, resources as requests equal to limits, the settings' pull secrets and service account (no API token
mounted unless asked), and the compose sidecars as more containers. Commands and files go over the API's exec
stream (stream.py, sandbox.py): no kubectl, no SSH. Tasks without internet are labelled for the namespace's
NetworkPolicy that denies egress, and refused where the cluster is not said to enforce one. A quota refusal
(403 exceeded quota) or a pod that stays Pending past schedule_timeout is back-pressure: the pod is given back
and the trial waits while the run opens fewer at once. The client is imported inside the methods that use it.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import TYPE_CHECKING, Any

from agentcompass.core.errors import BackPressure, BuildFailed, FatalInfraError, InfraError, TrialError, UserError
from agentcompass.core.sandbox import SandboxSpec, common_refusals, refusal
from agentcompass.providers.kubernetes.pod import (
    TRIAL_CONTAINER, egress_class, label_value, no_egress_policy, pod_labels, pod_manifest, pod_name,
)
from agentcompass.providers.kubernetes.sandbox import KubernetesSandbox, delete_pod, pod_ended
from agentcompass.providers.kubernetes.settings import KubernetesSettings
from agentcompass.providers.kubernetes.setup import api_client, kubernetes_readiness, resolved
from agentcompass.providers.remote import OWNER_LABEL, is_leftover, one_line, process_owner

if TYPE_CHECKING:
    from kubernetes.client import ApiClient, V1Pod

    from agentcompass.core.readiness import Readiness

POLL_S = 0.5  # how soon a new pod is first looked at again; then less often, up to MAX_POLL_S
MAX_POLL_S = 5.0  # many Pending pods polled fast would trip the API server's rate limits
NAME_RELEASE_WAIT_S = 60  # how long a deleted pod may keep its name from the next attempt
PULL_FAILURES = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")
CONFIG_FAILURES = ("CreateContainerConfigError", "CreateContainerError", "RunContainerError")


class KubernetesProvider:
    name = "kubernetes"
    extra, extra_modules = "kubernetes", ("kubernetes",)  # checked before a run (registry.check_extra)
    # Pacing defaults (run.env_open_qps / run.provider_limit override them): the API server's own rate limits
    # (priority and fairness) answer 429 past a few dozen writes a second; concurrency is the quota's to cap.
    default_open_qps, default_provider_limit = 5.0, None

    Settings = KubernetesSettings

    def __init__(self, keep: bool = False, **settings: Any) -> None:
        self.settings = self.Settings(**settings)
        self.keep = keep
        self._lock = threading.Lock()
        self._api: "ApiClient | None" = None
        self._policy_ready = False
        self._failed_images: dict[str, str] = {}  # image -> why it cannot be pulled, reported once per image
        self._owner = process_owner(uuid.uuid4().hex[:8])  # an annotation: who made a pod, for the name-clash rule
        self.aborting = threading.Event()  # set on Ctrl-C: trials waiting for a node give up

    @classmethod
    def readiness(cls, settings: dict[str, Any], live: bool, config_source: str = "") -> "Readiness":
        """`env check kubernetes` and `list envs`: credentials, namespace and (live) the RBAC verbs a run needs."""
        return kubernetes_readiness(KubernetesSettings(**settings), live, config_source)

    def _connect(self) -> "ApiClient":
        with self._lock:
            if self._api is None:
                self.settings = resolved(self.settings)
                self._api = api_client(self.settings)
            return self._api

    # -- provider protocol ---------------------------------------------------------------
    def check(self, spec: SandboxSpec) -> None:
        """Before the run: the task has a registry image, its network needs can be honoured, credentials load."""
        s = self.settings
        for field_name, user in spec.users.items():  # the exec API has no user to run as
            raise refusal(spec, "kubernetes", f'{field_name} = "{user}"', "commands run as the image's user")
        built = [c.name for c in (spec.compose.services if spec.compose else []) if not c.image]
        if built and spec.compose and spec.compose.required:
            raise refusal(spec, "kubernetes", f"sidecar services built from a Dockerfile ({', '.join(built)})",
                          "a cluster builds no images; push them to a registry and name them in the compose file")
        common_refusals(spec, "kubernetes", gpus=True, compose=True)
        if not spec.allow_internet and not s.network_policies_enforced:
            raise refusal(spec, "kubernetes", "no internet (allow_internet = false)",
                          "the cluster is not said to enforce NetworkPolicies; set network_policies_enforced: true "
                          "once its network plugin does (Calico, Cilium, ...)")
        if not (s.image or spec.image):
            raise UserError(f"task '{spec.name}' has only an environment/Dockerfile, which a cluster cannot build; push "
                            "the image and pass it with --env-params '{\"image\": \"REGISTRY/NAME:TAG\"}' or in the "
                            "recipe's overrides.kubernetes.image")
        self._connect()

    def interrupt(self) -> None:
        """The run is ending (Ctrl-C, SIGTERM): stop waiting for pods to be scheduled."""
        self.aborting.set()

    def open(self, spec: SandboxSpec) -> KubernetesSandbox:
        api = self._connect()
        s = self.settings
        image = s.image or spec.image
        if not image:
            raise InfraError(f"sandbox {spec.name} has no image")
        with self._lock:
            if image in self._failed_images:
                raise BuildFailed(f"{self._failed_images[image]} (not pulled again)")
        egress = None if spec.allow_internet else egress_class(s)
        if egress:
            self._ensure_policy(api)
        name = pod_name(spec.name)
        manifest = pod_manifest(spec, s, image, name, self._owner, egress)
        self._create(api, manifest, spec)
        try:
            self._wait_running(api, name, image)
        except BaseException:
            delete_pod(api, s.namespace, name, s.api_timeout)
            raise
        return KubernetesSandbox(api, name, spec, s, has_task_image=not s.image)

    # -- pods ----------------------------------------------------------------------------
    def _create(self, api: "ApiClient", manifest: "V1Pod", spec: SandboxSpec) -> None:
        """Create the pod; a name still held is waited for while its pod ends (an earlier attempt's), and
        replaced when it is this very trial's leftover, never when it is a live sibling's."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        s, name = self.settings, manifest.metadata.name
        core = client.CoreV1Api(api)
        deadline = time.monotonic() + NAME_RELEASE_WAIT_S
        while True:
            try:
                core.create_namespaced_pod(s.namespace, manifest, _request_timeout=s.api_timeout)
                return
            except ApiException as exc:
                if exc.status != 409:
                    raise classify(exc, f"cannot create pod {name}") from exc
            except Exception as exc:  # urllib3's connection errors
                raise InfraError(f"cannot create pod {name}: {one_line(exc)[:300]}") from exc
            try:
                holder = core.read_namespaced_pod(name, s.namespace, _request_timeout=s.api_timeout)
            except ApiException as exc:
                if exc.status == 404:
                    continue
                raise classify(exc, f"cannot read pod {name}") from exc
            if holder.metadata.deletion_timestamp is None:
                labels = {**(holder.metadata.labels or {}),
                          OWNER_LABEL: (holder.metadata.annotations or {}).get("agentcompass.io/owner", "")}
                running = pod_ended(holder) is None
                if not is_leftover(labels, running, pod_labels(spec, None), self._owner):
                    raise InfraError(f"pod name {name} is held by a live pod of another process; is another run using "
                                     f"this run name? end it, or: agentcompass cleanup --env kubernetes --run-name "
                                     f"{spec.labels.get('run', 'NAME')}")
                delete_pod(api, s.namespace, name, s.api_timeout)
            if time.monotonic() > deadline:
                raise InfraError(f"pod name {name} was not freed within {NAME_RELEASE_WAIT_S}s")
            time.sleep(POLL_S)

    def _wait_running(self, api: "ApiClient", name: str, image: str) -> None:
        """Until the trial container runs, at most schedule_timeout: Pending past it (no node fits, the quota's
        CPU is taken) is back-pressure; an image that cannot be pulled fails every trial that needs it, once."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        s = self.settings
        core = client.CoreV1Api(api)
        started = time.monotonic()
        why = "no node has taken it yet"
        while True:
            if self.aborting.is_set():
                raise InfraError("interrupted")
            try:
                pod = core.read_namespaced_pod(name, s.namespace, _request_timeout=s.api_timeout)
            except ApiException as exc:
                busy = exc.status == 429 or exc.status >= 500
                if busy and time.monotonic() - started < s.schedule_timeout:  # the pod may be fine: look again
                    time.sleep(MAX_POLL_S)
                    continue
                raise classify(exc, f"cannot read pod {name}") from exc
            except Exception as exc:
                raise InfraError(f"cannot read pod {name}: {one_line(exc)[:300]}") from exc
            ended = pod_ended(pod)
            if ended:
                raise InfraError(f"{ended} before its first command")
            for container in pod.status.container_statuses or [] if pod.status else []:
                if container.name != TRIAL_CONTAINER:
                    continue
                if container.state and container.state.running:
                    return
                waiting = container.state.waiting if container.state else None
                if waiting and waiting.reason in PULL_FAILURES and waiting.reason != "ErrImagePull":
                    message = (f"image {image} cannot be pulled ({waiting.reason}: {one_line(waiting.message or '')[:200]}); "
                               "check its name and image_pull_secrets")
                    with self._lock:
                        self._failed_images[image] = message
                    raise BuildFailed(message)
                if waiting and waiting.reason in CONFIG_FAILURES:
                    raise FatalInfraError(f"pod {name} cannot start its container ({waiting.reason}: "
                                          f"{one_line(waiting.message or '')[:200]}); check the env settings")
                if waiting and waiting.reason:
                    why = f"waiting: {waiting.reason}"
            for condition in pod.status.conditions or [] if pod.status else []:
                if condition.type == "PodScheduled" and condition.status == "False":
                    why = f"unschedulable: {one_line(condition.message or condition.reason or '')[:200]}"
            waited = time.monotonic() - started
            if waited > s.schedule_timeout:
                raise BackPressure(f"pod {name} was still Pending after schedule_timeout = {s.schedule_timeout}s ({why}); "
                                   "given back, opening fewer at once and waiting")
            time.sleep(min(MAX_POLL_S, POLL_S + waited / 10, max(0.05, s.schedule_timeout - waited + 0.05)))

    def _ensure_policy(self, api: "ApiClient") -> None:
        """The namespace's NetworkPolicy that denies egress to pods labelled for it: created before the first such
        pod, so that none runs a moment without it; kept (shared by every run in the namespace)."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        with self._lock:
            if self._policy_ready:
                return
            s = self.settings
            networking = client.NetworkingV1Api(api)
            wanted = no_egress_policy(s)
            name = wanted.metadata.name
            try:
                networking.create_namespaced_network_policy(s.namespace, wanted, _request_timeout=s.api_timeout)
            except ApiException as exc:
                if exc.status != 409:  # 409: it is there already
                    raise classify(exc, f"cannot create NetworkPolicy {name}") from exc
                current = networking.read_namespaced_network_policy(name, s.namespace, _request_timeout=s.api_timeout)
                if api.sanitize_for_serialization(current.spec) != api.sanitize_for_serialization(wanted.spec):
                    raise FatalInfraError(f"NetworkPolicy {name} in namespace {s.namespace} is not the one agentcompass "
                                          "makes (it may allow egress no-internet tasks must not have); delete it "
                                          "(it is made again) or fix it")
            self._policy_ready = True

    def cleanup(self, run_name: str | None = None) -> int:
        """Delete pods an earlier run left behind (labelled agentcompass=1 [and run=NAME])."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        api, s = self._connect(), self.settings
        selector = "agentcompass=1" + (f",run={label_value(run_name)}" if run_name else "")
        try:
            pods = client.CoreV1Api(api).list_namespaced_pod(s.namespace, label_selector=selector,
                                                             _request_timeout=s.api_timeout)
        except ApiException as exc:
            raise classify(exc, f"cannot list pods in namespace {s.namespace}") from exc
        for pod in pods.items:
            delete_pod(api, s.namespace, pod.metadata.name, s.api_timeout)
        return len(pods.items)


def classify(exc: Any, what: str) -> TrialError:
    """An API refusal as a trial error: quota and rate limits are back-pressure, credentials and permissions
    stop the run, the server's own troubles are retried."""
    body = one_line(getattr(exc, "body", "") or "")
    text = f"{what}: {exc.status} {one_line(exc.reason)}: {body[:300]}"
    if exc.status == 403 and "exceeded quota" in body:
        return BackPressure(f"{text}; opening fewer pods at once and waiting")
    if exc.status == 429:
        return BackPressure(f"{text}; the API server asks for fewer requests")
    if exc.status in (401, 403):
        return FatalInfraError(f"{text} (not retried: check the credentials and the RBAC verbs with "
                               "`agentcompass env check kubernetes`)")
    if exc.status in (400, 404, 422):
        return FatalInfraError(f"{text} (not retried: the cluster refused the request; check the env settings and the namespace)")
    return InfraError(text)
