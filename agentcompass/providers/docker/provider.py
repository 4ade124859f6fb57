"""The docker provider: each trial in its own container on a Docker engine (DOCKER_HOST honoured).

The provider connects to the engine, checks a task before the run, opens its container (or a compose
project, or an allowlist task's network and egress proxy) and cleans up what a killed run left. Its
images are resolved, pulled and built in images; its sandboxes live in sandbox. Every operation goes
through the engine API on one shared client. The `docker` SDK is imported inside the methods that use
it, never when the CLI starts.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentcompass.core.errors import InfraError, UserError
from agentcompass.core.readiness import docker_readiness
from agentcompass.core.sandbox import ContainerSpec, SandboxSpec, common_refusals, refusal, uncapped_storage
from agentcompass.providers.docker.build import BUILDS
from agentcompass.providers.docker.compose import (cleanup_networks, create_network, create_options, host_options,
                                                   networking, remove_services, start_services, volume_names)
from agentcompass.providers.docker.egress import CONTEXT as EGRESS_CONTEXT, PROXY_ENV, Egress, uses_egress
from agentcompass.providers.docker.entrypoint import entrypoint_exited, image_entrypoint
from agentcompass.providers.docker.hardening import hardened_options, refuse_privileges
from agentcompass.providers.docker.images import DockerImages
from agentcompass.providers.docker.run_network import RunNetwork, missing_network
from agentcompass.providers.docker.sandbox import ComposeSandbox, DockerSandbox
from agentcompass.providers.docker.settings import DockerSettings
from agentcompass.providers.remote import OWNER_LABEL, is_leftover, one_line, process_owner

if TYPE_CHECKING:
    import docker

# The container's command, in place of the image's CMD; the image's ENTRYPOINT runs with it as its arguments, as
# Harbor's compose file (`command: sh -c "sleep infinity"`), the SWE-bench harness and Terminal-Bench run theirs:
# an entrypoint that starts a service and then execs its arguments leaves the service running (what a task's
# healthcheck and tests expect); an image without one runs the keep-alive itself. As PID 1 without init the
# shell ignores SIGTERM and SIGINT (the kernel drops them for a namespace's init that set no handler), as the
# official `sleep infinity` does; close() removes the container by force.
KEEP_ALIVE = ["/bin/sh", "-c", "while :; do sleep 3600 & wait $!; done"]
NETWORK_REMAKES = 3  # how often a start remakes the run network another job of the run removed meanwhile
START_HINT = ("start the engine (`sudo systemctl start docker`, or run `sudo dockerd` in another terminal; "
              "on macOS/Windows open Docker Desktop) or point DOCKER_HOST at a running engine")


def docker_host() -> str:
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


class DockerProvider:
    readiness = staticmethod(docker_readiness)  # `env check docker`
    name = "docker"

    Settings = DockerSettings
    # What a flavour of the engine (podman: providers/podman/) replaces: its sandboxes and its images.
    sandbox_class: type[DockerSandbox] = DockerSandbox
    compose_sandbox_class: type[ComposeSandbox] = ComposeSandbox
    images_class: type[DockerImages] = DockerImages

    def __init__(self, keep: bool = False, **settings: Any) -> None:
        self.settings = self.Settings(**settings)
        self.keep = keep  # the trial runner keeps sandboxes by not closing them; close always removes
        self._client: "docker.DockerClient | None" = None
        self._engine_cpus = 0
        self._engine_gpus = False  # the engine has the nvidia runtime
        self._storage_lack: str | None = None  # why the engine cannot cap a container's disk (None: it can)
        self._lock = threading.Lock()
        self.images = self.images_class(lambda: self.client, self.settings)
        self._owner = process_owner(uuid.uuid4().hex[:8])  # labels our containers, for the name-clash rule
        self.run_network = RunNetwork(lambda: self.client.api, self._owner)
        self._entrypoints: dict[str, bool] = {}  # image -> it has an ENTRYPOINT (a run's images do not change under it)

    # -- engine --------------------------------------------------------------------------
    @property
    def client(self) -> "docker.DockerClient":
        with self._lock:
            if self._client is None:
                self._client = self._connect()
            return self._client

    def _new_client(self) -> "docker.DockerClient":
        """A client of the engine (not yet asked anything): DOCKER_HOST's, or the default socket."""
        import docker

        return docker.from_env(timeout=int(self.settings.api_timeout_s), max_pool_size=self.settings.max_connections)

    def _unreachable(self, exc: Exception) -> str:
        """The one line a user reads when the engine does not answer."""
        return f"no Docker engine answers at {docker_host()} (DOCKER_HOST) ({one_line(exc)[:200]}); {START_HINT}"

    def _connect(self) -> "docker.DockerClient":
        import docker

        try:
            client = self._new_client()
            info = client.info()
            self._engine_cpus = int(info.get("NCPU") or 0)
            self._engine_gpus = "nvidia" in (info.get("Runtimes") or {})
            self._storage_lack = storage_lack(info)
        except docker.errors.DockerException as exc:
            raise UserError(self._unreachable(exc)) from exc
        return client

    # -- provider protocol ---------------------------------------------------------------
    def check(self, spec: SandboxSpec) -> None:
        """Before the run: the engine answers, the task has an image, and a missing image exists in its registry."""
        self.client  # connects: the engine answers, and its capabilities are known
        # A compose task's network is its services' too: cutting it between phases would cut them off.
        if spec.compose and "allowlist" in spec.network_modes:
            raise refusal(spec, self.name, 'network_mode = "allowlist" with docker-compose services',
                          "its egress proxy serves a trial's own container only")
        common_refusals(spec, self.name, gpus=self._engine_gpus, switch_network=spec.compose is None, compose=True,
                        allowlist=True)
        refuse_privileges(spec, self.settings)
        if uses_egress(spec):  # its proxy's image is built in the trial: its base must be to hand
            self.images.check_build_bases(dataclasses.replace(spec, build_context=EGRESS_CONTEXT,
                                                               build_args={"BASE_IMAGE": self.settings.egress_base_image}))
        if spec.storage_mb and self._storage_lack:
            if self.settings.storage_limit == "required":
                raise refusal(spec, self.name, f"[environment] storage_mb = {spec.storage_mb}", self._storage_lack)
            uncapped_storage(spec, self.name, f"{self._storage_lack}; --env-params '{{\"storage_limit\": \"required\"}}' "
                                             "refuses such tasks instead")
        self.images.check(spec)

    def open(self, spec: SandboxSpec) -> "DockerSandbox":
        import docker

        image, own = self.images.image_for(spec)
        client = spec.compose.client if spec.compose else None
        services = self._start_services(spec) if spec.compose else []
        settings = self.settings
        cpus = settings.cpu or spec.cpus
        if cpus and self._engine_cpus:
            cpus = min(cpus, self._engine_cpus)
        memory_mb = settings.memory or spec.memory_mb
        api = self.client.api
        # A task whose phases switch networks starts on the network and leaves it when a phase wants none;
        # one with an allowlist lives on a network of its own whose way out is the phase's proxy.
        egress = Egress(self, spec) if uses_egress(spec) else None
        switches = "public" in spec.network_modes and not egress
        public = self.public_network(spec) if not client and (spec.allow_internet or switches or egress) else None
        network = public if spec.allow_internet or switches else "none"
        if egress:
            egress.open(public or "none")
        host_config = api.create_host_config(
            network_mode=(client.network_mode or spec.name) if client else spec.name if egress else network,
            device_requests=[docker.types.DeviceRequest(count=spec.gpus, capabilities=[["gpu"]])] if spec.gpus else None,
            nano_cpus=int(cpus * 1e9) if cpus else None,
            mem_limit=f"{memory_mb}m" if memory_mb else None,
            storage_opt={"size": f"{spec.storage_mb}M"} if spec.storage_mb and not self._storage_lack else None,
            init=settings.init,
            **(host_options(client, spec.name) if client else {}),
            **hardened_options(settings, client),
        )
        keep_alive = {"command": KEEP_ALIVE} if spec.image_entrypoint else {"entrypoint": KEEP_ALIVE[:1],
                                                                           "command": KEEP_ALIVE[1:]}
        create = dict(image=image, **keep_alive, working_dir=spec.workdir or None,
                      environment={**spec.env, **(PROXY_ENV if egress else {})},
                      labels={**spec.labels, OWNER_LABEL: self._owner}, name=spec.name,
                      host_config=host_config, detach=True)
        if client:  # a compose service keeps its own entrypoint and command: they may start what the task needs
            create.update(create_options(client))
            if not client.network_mode:
                create["networking_config"] = networking(api, spec.name, client.name)
        try:
            try:
                created = api.create_container(**create)
            except docker.errors.APIError as exc:
                if public and missing_network(exc):  # another job of the run removed it between its trials
                    self.public_network(spec, again=True)
                elif exc.status_code == 409:
                    self._remove_leftover(spec)
                else:
                    raise
                created = api.create_container(**create)
        except docker.errors.APIError as exc:
            if spec.compose:
                remove_services(api, spec.name, services, volume_names(spec))
            if egress:
                egress.close()
            raise InfraError(f"cannot create container {spec.name} from {image}: {one_line(exc.explanation or exc)}") from exc
        if not spec.workdir:  # the image's own WorkingDir, `/` when it sets none (as `docker run` does)
            spec = dataclasses.replace(spec, workdir=api.inspect_image(image)["Config"].get("WorkingDir") or "/")
        if spec.compose:
            sandbox: DockerSandbox = self.compose_sandbox_class(self.client, created["Id"], spec, settings, services, has_task_image=own)
        else:
            sandbox = self.sandbox_class(self.client, created["Id"], spec, settings, has_task_image=own, egress=egress)
        sandbox.public_network = public or "none"
        try:
            self._start(created["Id"], spec, public)
            if not client and spec.image_entrypoint and self._has_entrypoint(image) \
                    and entrypoint_exited(api, sandbox.id, spec.name):
                api.remove_container(sandbox.id, force=True, v=True)
                sandbox.id = api.create_container(**{**create, "entrypoint": KEEP_ALIVE[:1], "command": KEEP_ALIVE[1:]})["Id"]
                self._start(sandbox.id, spec, public)
        except docker.errors.APIError as exc:
            sandbox.close()
            raise InfraError(f"cannot start container {spec.name} from {image}: {one_line(exc.explanation or exc)}") from exc
        if switches and not spec.allow_internet:
            sandbox.set_network("no-network")
        return sandbox

    def _start(self, container: str, spec: SandboxSpec, public: str | None) -> None:
        """Start a created container. A container joins its network only when it starts, so another job of the run
        that ended meanwhile with no container on the run's network removed it ("network ... not found"): the
        network is made anew and the start tried again, as the create path does."""
        import docker

        for tries_left in range(NETWORK_REMAKES, -1, -1):
            try:
                self.client.api.start(container)
                return
            except docker.errors.APIError as exc:
                if not (public and not self.settings.network and missing_network(exc)) or not tries_left:
                    raise
                self.public_network(spec, again=True)

    def _has_entrypoint(self, image: str) -> bool:
        if image not in self._entrypoints:
            self._entrypoints[image] = bool(image_entrypoint(self.client.api, image))
        return self._entrypoints[image]

    def public_network(self, spec: SandboxSpec, again: bool = False) -> str:
        """The network of a trial that may reach the internet: the user's `network`, else the run's own
        (`again`: it was found gone, made anew)."""
        return self.settings.network or self.run_network.ensure(spec.labels.get("run") or "run", again)

    def host_address(self, run_name: str) -> str:
        """The IPv4 address at which this run's sandboxes that have a network reach this host (the gateway
        of the run's network, made if need be): where a service for them (the model gateway) listens."""
        return self.run_network.host_address(self.settings.network or self.run_network.ensure(run_name))

    def end_run(self, run_name: str) -> None:
        """The run is over: its network goes (not while a kept sandbox is on it)."""
        if self._client is not None and not self.settings.network:
            self.run_network.remove(run_name)

    def _remove_leftover(self, spec: SandboxSpec) -> None:
        """The trial's name is taken: remove the holder only when it is this very trial's leftover."""
        import docker

        try:
            info = self.client.api.inspect_container(spec.name)
        except docker.errors.NotFound:
            return  # removed meanwhile
        labels = info["Config"].get("Labels") or {}
        if not is_leftover(labels, info["State"].get("Status") == "running", spec.labels, self._owner):
            raise InfraError(f"container name {spec.name} is held by a live container "
                             f"(owner {labels.get(OWNER_LABEL)}); is another run using this run name? end it, or "
                             "remove its containers with "
                             f"`agentcompass cleanup --env {self.name} --run-name {spec.labels.get('run', 'NAME')}`")
        self.client.api.remove_container(spec.name, force=True, v=True)

    def cleanup(self, run_name: str | None = None) -> int:
        """Remove containers an earlier run left behind (a SIGKILL leaves them); returns how many."""
        import docker

        labels = ["agentcompass=1"] + ([f"run={run_name}"] if run_name else [])
        removed = 0
        for container in self.client.api.containers(all=True, filters={"label": labels}):
            try:
                self.client.api.remove_container(container["Id"], force=True, v=True)
                removed += 1
            except docker.errors.NotFound:
                continue
        cleanup_networks(self.client, labels)  # compose tasks' networks and volumes
        return removed

    # -- images: compose services and the egress proxy ask the provider (engine.DockerEngine) --------------
    def service_image(self, service: ContainerSpec, log_dir: Path | None) -> str:
        """A compose service's image: pulled, or built (its log is build-SERVICE.log)."""
        return self.images.service_image(service, log_dir)

    def egress_image(self, log_dir: Path | None) -> str:
        """The egress proxy's image, built once per engine."""
        return self.images.egress_image(log_dir)

    def _start_services(self, spec: SandboxSpec) -> list[str]:
        create_network(self.client.api, spec)
        try:
            return start_services(self, spec)
        except BaseException:
            remove_services(self.client.api, spec.name, [], volume_names(spec))
            raise

    def interrupt(self) -> None:
        """Ctrl-C: end every image build in flight (the sandboxes are closed by the runner)."""
        BUILDS.kill_all()


def storage_lack(info: dict[str, Any]) -> str | None:
    """Why the engine's storage driver cannot cap a container's disk (--storage-opt size), None when it can:
    btrfs, zfs, devicemapper and windowsfilter can; overlay2 only over xfs (mounted with pquota)."""
    driver = str(info.get("Driver") or "unknown")
    backing = dict((info.get("DriverStatus") or [])).get("Backing Filesystem", "unknown")
    if driver in ("btrfs", "zfs", "devicemapper", "windowsfilter") or (driver == "overlay2" and backing == "xfs"):
        return None
    return f"its {driver} storage driver on {backing} sets no disk size"
