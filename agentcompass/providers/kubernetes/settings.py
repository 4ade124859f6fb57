"""The kubernetes env's settings (`environments.kubernetes`, --env-params): read by the provider that
creates the pods and by each sandbox that runs commands in one."""

from __future__ import annotations

from pydantic import Field, SecretStr, model_validator

from agentcompass.core.sandbox import DEFAULT_OUTPUT_CAP
from agentcompass.core.schema import Positive, PositiveInt, Strict


class KubernetesSettings(Strict):
    namespace: str | None = None  # where the pods (and the no-egress NetworkPolicy) are made; default: the context's, else "default"
    # Credentials, first found wins: api_server + token (a private --config file), then kubeconfig (this file,
    # else $KUBECONFIG, else ~/.kube/config) with `context`, then the in-cluster service account.
    kubeconfig: str | None = None
    context: str | None = None
    api_server: str | None = None
    token: SecretStr | None = None
    ca_cert: str | None = None  # the API server's CA (a PEM file) for api_server + token; default: the system's
    image: str | None = None  # run every task in this registry image instead of its own
    image_pull_policy: str | None = None  # Always, IfNotPresent or Never; default: the cluster's
    image_pull_secrets: list[str] = Field(default_factory=list)  # Secret names in the namespace
    service_account: str | None = None  # none: the namespace's default, with no token mounted
    mount_service_account: bool = False  # a pod's API token is the agent's too: off unless asked
    cpu: Positive | None = None  # vCPUs (Kubernetes cores); overrides the task's; request = limit
    memory: PositiveInt | None = None  # MiB; overrides the task's; request = limit
    gpu_resource: str = "nvidia.com/gpu"  # the extended resource a task's gpus are asked as
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[dict[str, str]] = Field(default_factory=list)  # V1Toleration fields (key, operator, value, effect)
    env_variables: dict[str, str] = Field(default_factory=dict)  # non-secret variables set in every pod
    # Tasks without internet get a NetworkPolicy that denies their pods all egress. It holds only where the
    # cluster's network plugin enforces NetworkPolicies (Calico, Cilium, ...; kindnet and flannel alone do not);
    # until this says it does, such tasks are refused before the run.
    network_policies_enforced: bool = False
    gateway_egress_cidr: str | None = None  # e.g. 10.0.0.5/32: the one address no-internet pods may still reach (the model gateway)
    schedule_timeout: PositiveInt = 600  # seconds a pod may stay Pending (no node, pulling) before it is given back
    lifetime: PositiveInt | None = None  # seconds: the pod's activeDeadlineSeconds; default the task's, else 7200
    shell: str = "bash"  # runs every exec'd command: SHELL -c CMD
    output_cap_bytes: PositiveInt = DEFAULT_OUTPUT_CAP
    api_timeout: PositiveInt = 60  # seconds for one API call (exec streams excepted)

    @model_validator(mode="after")
    def _coherent(self) -> "KubernetesSettings":
        if bool(self.api_server) != bool(self.token):
            raise ValueError("set api_server and token together (or neither, to use a kubeconfig or the in-cluster account)")
        if self.image_pull_policy not in (None, "Always", "IfNotPresent", "Never"):
            raise ValueError("image_pull_policy is Always, IfNotPresent or Never")
        return self
