"""The podman provider: the docker provider over podman's Docker-compatible API, rootful or rootless.

Most of a trial is the same calls on both engines (create, start, exec, archives, inspect, top, diff), so this
is the docker provider with what podman does differently replaced, each said where it is done:
- the socket (engine.py): podman's API service, the user's own when rootless;
- the network of a trial that may reach the internet (network.py): a bridge per trial with isolate=true, as
  podman has no switch for docker's inter-container traffic;
- builds (images.py): buildah through podman's build endpoint, heredocs rewritten, no BuildKit;
- what changed in a container (sandbox.py): podman's `overlay` storage, walked only by root;
- limits: rootless podman on cgroup v1 (or v2 without the controllers delegated) applies no memory, cpu or
  process limit (it says so in its log and runs): such a host is warned once per run, and `limits: required`
  refuses to run there. Rootless and the cgroup facts come from podman's own API (the compatible info omits them).
The rest is the docker provider's, and so are its guarantees: the hardening (hardening.py: capabilities,
no-new-privileges, the process limit, which podman applies as docker does), the image's ENTRYPOINT with the
keep-alive (entrypoint.py: podman's top answers as docker's), exec streams (the same multiplexed frames), OOM
kills, the name-clash rule and `cleanup`. Not yet run on podman, so refused before the run with one line:
docker-compose sidecars a task needs and the allowlist egress proxy (both need networks made as docker makes
them); a compose file whose services a task can do without (Terminal-Bench's) runs its client alone, as on
the other envs without sidecars.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import TYPE_CHECKING, Any

from agentcompass.core.errors import UserError
from agentcompass.core.sandbox import SandboxSpec, common_refusals, refusal
from agentcompass.providers.docker.provider import DockerProvider
from agentcompass.providers.podman.engine import START_HINT, engine_facts, limits_lack, podman_host
from agentcompass.providers.podman.images import PodmanImages
from agentcompass.providers.podman.network import create_isolated_network, remove_network, trial_network_name
from agentcompass.providers.podman.readiness import podman_readiness
from agentcompass.providers.podman.sandbox import PodmanSandbox
from agentcompass.providers.podman.settings import PodmanSettings
from agentcompass.providers.remote import one_line

if TYPE_CHECKING:
    import docker


class PodmanProvider(DockerProvider):
    readiness = staticmethod(podman_readiness)  # `env check podman`
    name = "podman"

    Settings = PodmanSettings
    settings: PodmanSettings
    sandbox_class = PodmanSandbox
    images_class = PodmanImages

    def __init__(self, keep: bool = False, **settings: Any) -> None:
        super().__init__(keep, **settings)
        self.rootless = False
        self._unlimited: str | None = None  # why this engine applies no resource limits (None: it does)
        self._limits_warned = False

    # -- engine --------------------------------------------------------------------------
    def _new_client(self) -> "docker.DockerClient":
        import docker

        return docker.DockerClient(base_url=podman_host(self.settings.host), timeout=int(self.settings.api_timeout_s),
                                   max_pool_size=self.settings.max_connections)

    def _unreachable(self, exc: Exception) -> str:
        return f"no podman API answers at {podman_host(self.settings.host)} ({one_line(exc)[:200]}); {START_HINT}"

    def _connect(self) -> "docker.DockerClient":
        import docker

        client = super()._connect()
        try:
            facts = engine_facts(client.api)
        except (docker.errors.DockerException, OSError, ValueError) as exc:
            raise UserError(f"the engine at {podman_host(self.settings.host)} does not answer podman's own API "
                            f"({one_line(exc)[:160]}); is it podman? (a Docker engine: --env docker)") from exc
        self.rootless = facts["rootless"]
        self._unlimited = limits_lack(facts)
        return client

    # -- provider protocol ---------------------------------------------------------------
    def check(self, spec: SandboxSpec) -> None:
        spec = without_compose(spec)
        common_refusals(spec, "podman", gpus=False, switch_network=True, compose=False, allowlist=False)
        self.client  # connects: rootless and cgroup version are known
        if self._unlimited:
            if self.settings.limits == "required":
                raise refusal(spec, "podman", "cpu, memory and process limits", self._unlimited)
            if not self._limits_warned:
                self._limits_warned = True
                print(f"warning: {self._unlimited}: trials run without those limits (rootful podman, or cgroup v2 "
                      "with the controllers delegated to the user, sets them; --env-params '{\"limits\": \"required\"}' "
                      "refuses to run instead)", file=sys.stderr, flush=True)
        super().check(spec)

    def public_network(self, spec: SandboxSpec, again: bool = False) -> str:
        """The trial's own isolated network (network.py), or the user's `network` as it is."""
        if self.settings.network:
            return self.settings.network
        name = trial_network_name(spec.name)
        create_isolated_network(self.client.api, name, {**spec.labels, "agentcompass": "1"})
        return name

    def open(self, spec: SandboxSpec) -> PodmanSandbox:
        spec = without_compose(spec)
        try:
            sandbox = super().open(spec)
        except BaseException:
            if not self.settings.network:  # made for it, or a leftover: no trial of that name runs now
                remove_network(self.client.api, trial_network_name(spec.name))
            raise
        assert isinstance(sandbox, PodmanSandbox)
        if not self.settings.network and sandbox.public_network != "none":
            sandbox.trial_network = sandbox.public_network
        return sandbox

    def end_run(self, run_name: str) -> None:
        """Trials' networks left by a failed open or a kept sandbox stay until `cleanup`; nothing is shared per run."""


def without_compose(spec: SandboxSpec) -> SandboxSpec:
    """The spec with a compose file's services dropped where the task does without them (its client runs alone);
    one whose services are required keeps them, and check() refuses it (common_refusals)."""
    if spec.compose and not spec.compose.required:
        return dataclasses.replace(spec, compose=None)
    return spec
