"""The docker provider: each trial in its own container on a Docker engine (DOCKER_HOST honoured).

The image is a run-wide override, the task's registry image (pulled when missing) or the
task's environment/Dockerfile built under a content-hash tag, so an unchanged task is never
rebuilt. Every operation goes through the engine API on one shared client: one create and
start per trial, exec over the API socket, files as tar archives. The `docker` SDK is
imported inside the methods that use it, never when the CLI starts.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import re
import tarfile
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import AliasChoices, Field

from agentcompass.core.errors import BuildFailed, InfraError, UserError
from agentcompass.core.readiness import docker_readiness
from agentcompass.providers.remote import (
    EXEC_MARK, KILL_MARKED, OWNER_LABEL, RemoteSandbox, extract_renamed, is_leftover, one_line,
    process_owner, read_frames, upload_archive,
)
from agentcompass.providers.docker.build import BUILDS, BuildRequest, build_image
from agentcompass.providers.docker.egress import CONTEXT as EGRESS_CONTEXT, PROXY_ENV, Egress, uses_egress
from agentcompass.providers.docker.compose import (cleanup_networks, create_network, create_options, host_options,
                                                   networking, remove_services, start_services, volume_names)
from agentcompass.core.sandbox import (DEFAULT_OUTPUT_CAP, ContainerSpec, ExecResult, SandboxSpec, cap_output, common_refusals,
                                  refusal, uncapped_storage)
from agentcompass.core.schema import Positive, PositiveInt, Strict

if TYPE_CHECKING:
    import docker

# PID 1 of every container: independent of the image's ENTRYPOINT and CMD, and it exits on SIGTERM.
# No trap: as PID 1 without init, the shell ignores SIGTERM and SIGINT (the kernel drops them for a namespace's
# init that set no handler), as the official `sleep infinity` does; close() removes the container by force.
KEEP_ALIVE = ["-c", "while :; do sleep 3600 & wait $!; done"]
START_HINT = ("start the engine (`sudo systemctl start docker`, or run `sudo dockerd` in another terminal; "
              "on macOS/Windows open Docker Desktop) or point DOCKER_HOST at a running engine")
# The kernel's count of processes killed for exceeding the container's memory limit (cgroup v2, then v1).
OOM_KILLS = ("cat /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control 2>/dev/null "
             "| while read -r key value; do [ \"$key\" = oom_kill ] && echo \"$value\"; done; true")


def docker_host() -> str:
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


class DockerProvider:
    readiness = staticmethod(docker_readiness)  # `env check docker`
    name = "docker"

    class Settings(Strict):
        image: str | None = None  # run-wide image for every task, instead of the task's own
        network: str = "bridge"  # for tasks that allow internet; the others get `none`
        # One spelling across providers (the Modal docs'); the older names are accepted as aliases.
        cpu: Positive | None = Field(None, validation_alias=AliasChoices("cpus", "cpu"))  # overrides the task's cpus (clamped to the engine's CPU count)
        memory: PositiveInt | None = Field(None, validation_alias=AliasChoices("memory_mb", "memory"))  # MiB; overrides the task's
        shell: str = "bash"  # runs every exec'd command: SHELL -c CMD
        # No init, as swebench, terminal-bench and Harbor run their containers: PID 1 is the keep-alive shell,
        # which ignores an agent's `kill 1` as their `sleep infinity` does. True: the engine's docker-init.
        init: bool = False
        output_cap_bytes: PositiveInt = DEFAULT_OUTPUT_CAP  # kept per stream and exec; the rest is dropped and marked
        pull_timeout_s: Positive = 1800.0
        build_timeout_s: Positive = 1800.0
        buildkit: bool = True  # build with BuildKit through the docker CLI when one can; else the legacy builder
        api_timeout_s: Positive = 300.0  # one engine API call (create, upload, remove, ...)
        max_connections: PositiveInt = 64  # HTTP connections to the engine: one per exec in flight
        # A task's [environment] storage_mb where the storage driver cannot cap a container's disk:
        # best_effort runs it on the engine's disk (one warning), required refuses it.
        storage_limit: Literal["best_effort", "required"] = "best_effort"
        # What the egress proxy of allowlist tasks is built FROM (it apt-installs tinyproxy).
        egress_base_image: str = Field(default_factory=lambda: os.environ.get("AGENTCOMPASS_BASE_IMAGE") or "debian:bookworm-slim")

    def __init__(self, keep: bool = False, **settings: Any) -> None:
        self.settings = self.Settings(**settings)
        self.keep = keep  # the trial runner keeps sandboxes by not closing them; close always removes
        self._client: "docker.DockerClient | None" = None
        self._engine_cpus = 0
        self._engine_gpus = False  # the engine has the nvidia runtime
        self._storage_lack: str | None = None  # why the engine cannot cap a container's disk (None: it can)
        self._lock = threading.Lock()
        self._image_locks: dict[str, threading.Lock] = {}
        self._ready: set[str] = set()  # images known to be present on the engine
        self._tags: dict[Path, str] = {}  # build context -> content-hash tag
        self._registry_checked = False
        self._bases_checked: set[str] = set()  # FROM images found in their registry before the run
        self._fallbacks: set[str] = set()  # images to build from the task's Dockerfile, as no registry has them
        self._failed_builds: dict[str, str] = {}  # build context and args -> the failure, reported once
        self._owner = process_owner(uuid.uuid4().hex[:8])  # labels our containers, for the name-clash rule

    # -- engine --------------------------------------------------------------------------
    @property
    def client(self) -> "docker.DockerClient":
        with self._lock:
            if self._client is None:
                self._client = self._connect()
            return self._client

    def _connect(self) -> "docker.DockerClient":
        import docker

        try:
            client = docker.from_env(timeout=int(self.settings.api_timeout_s), max_pool_size=self.settings.max_connections)
            info = client.info()
            self._engine_cpus = int(info.get("NCPU") or 0)
            self._engine_gpus = "nvidia" in (info.get("Runtimes") or {})
            self._storage_lack = storage_lack(info)
        except docker.errors.DockerException as exc:
            raise UserError(f"no Docker engine answers at {docker_host()} (DOCKER_HOST) ({one_line(exc)[:200]}); {START_HINT}") from exc
        return client

    def _image_lock(self, image: str) -> threading.Lock:
        with self._lock:
            return self._image_locks.setdefault(image, threading.Lock())

    def _has_image(self, image: str) -> bool:
        import docker

        if image in self._ready:
            return True
        try:
            self.client.api.inspect_image(image)
        except docker.errors.ImageNotFound:
            return False
        self._ready.add(image)
        return True

    # -- provider protocol ---------------------------------------------------------------
    def check(self, spec: SandboxSpec) -> None:
        """Before the run: the engine answers, the task has an image, and a missing image exists in its registry."""
        import docker

        client = self.client
        # A compose task's network is its services' too: cutting it between phases would cut them off.
        if spec.compose and "allowlist" in spec.network_modes:
            raise refusal(spec, "docker", 'network_mode = "allowlist" with docker-compose services',
                          "its egress proxy serves a trial's own container only")
        common_refusals(spec, "docker", gpus=self._engine_gpus, switch_network=spec.compose is None, compose=True,
                        allowlist=True)
        if uses_egress(spec):  # its proxy's image is built in the trial: its base must be to hand
            self._check_build_bases(dataclasses.replace(spec, build_context=EGRESS_CONTEXT,
                                                        build_args={"BASE_IMAGE": self.settings.egress_base_image}))
        if spec.storage_mb and self._storage_lack:
            if self.settings.storage_limit == "required":
                raise refusal(spec, "docker", f"[environment] storage_mb = {spec.storage_mb}", self._storage_lack)
            uncapped_storage(spec, "docker", f"{self._storage_lack}; --env-params '{{\"storage_limit\": \"required\"}}' "
                                             "refuses such tasks instead")
        image = self.settings.image or spec.image
        if image is None:
            if spec.build_context is None:
                raise UserError(f"task '{spec.name}' names no image and has no environment/Dockerfile; "
                                "pass one with --env-params '{\"image\": \"NAME\"}'")
            self._check_build_bases(spec)
            return
        if self._registry_checked or self._has_image(image) or image in self._fallbacks:
            return
        # Ask the registry about the first missing image: a wrong name or an unreachable registry
        # stops the run here; the pulls themselves happen in the trials, in parallel.
        try:
            client.api.inspect_distribution(image)
        except docker.errors.APIError as exc:
            if not self.settings.image and can_build(spec):  # as Harbor builds environment/Dockerfile instead
                self._check_build_bases(spec)
                self._fallbacks.add(image)
                return
            raise UserError(pull_failure(image, exc)) from exc
        self._registry_checked = True

    def open(self, spec: SandboxSpec) -> "DockerSandbox":
        import docker

        image, own = self._image_for(spec)
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
        network = settings.network if spec.allow_internet or switches else "none"
        if egress:
            egress.open()
        host_config = api.create_host_config(
            network_mode=(client.network_mode or spec.name) if client else spec.name if egress else network,
            device_requests=[docker.types.DeviceRequest(count=spec.gpus, capabilities=[["gpu"]])] if spec.gpus else None,
            nano_cpus=int(cpus * 1e9) if cpus else None,
            mem_limit=f"{memory_mb}m" if memory_mb else None,
            storage_opt={"size": f"{spec.storage_mb}M"} if spec.storage_mb and not self._storage_lack else None,
            init=settings.init,
            **(host_options(client, spec.name) if client else {}),
        )
        create = dict(image=image, command=KEEP_ALIVE, entrypoint=["/bin/sh"], working_dir=spec.workdir or None,
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
                if exc.status_code != 409:
                    raise
                self._remove_leftover(spec)
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
            sandbox: DockerSandbox = ComposeSandbox(self.client, created["Id"], spec, settings, services, has_task_image=own)
        else:
            sandbox = DockerSandbox(self.client, created["Id"], spec, settings, has_task_image=own, egress=egress)
        try:
            api.start(created["Id"])
        except docker.errors.APIError as exc:
            sandbox.close()
            raise InfraError(f"cannot start container {spec.name} from {image}: {one_line(exc.explanation or exc)}") from exc
        if switches and not spec.allow_internet:
            sandbox.set_network("no-network")
        return sandbox

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
                             f"`agentcompass cleanup --env docker --run-name {spec.labels.get('run', 'NAME')}`")
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

    # -- images --------------------------------------------------------------------------
    def _image_for(self, spec: SandboxSpec) -> tuple[str, bool]:
        """The image to run and whether it is the task's own (then it already holds the task's files)."""
        if self.settings.image:
            self._pull(self.settings.image)
            return self.settings.image, False
        if spec.image:
            if can_build(spec):
                self._pull_or_build(spec)
            else:
                self._pull(spec.image)
            return spec.image, True
        if spec.build_context is None:
            raise InfraError(f"sandbox {spec.name} has no image and no Dockerfile to build")
        client = spec.compose.client if spec.compose else None
        if client:
            return self._build(spec.build_context, spec.log_dir, client.dockerfile, client.build_args), True
        return self._build_once(spec), True

    def _build_once(self, spec: SandboxSpec) -> str:
        """Build the task's image; a failed build is recorded once per image and never retried: every
        other trial needing it fails at once (building again would fail the same way)."""
        assert spec.build_context is not None
        key = f"{spec.build_context} {sorted(spec.build_args.items())}"
        with self._lock:
            failed = self._failed_builds.get(key)
        if failed:
            raise BuildFailed(f"{failed} (not built again)")
        try:
            # A separate verifier's image (Harbor's tests/Dockerfile) keeps the task's build.log beside its own.
            log_name = "build-grade.log" if spec.labels.get("phase") == "grade" else "build.log"
            return self._build(spec.build_context, spec.log_dir, build_args=spec.build_args, log_name=log_name)
        except InfraError as exc:
            with self._lock:
                self._failed_builds[key] = str(exc)
            raise BuildFailed(str(exc)) from exc

    def _pull_or_build(self, spec: SandboxSpec) -> None:
        """The task's image, pulled; where no registry has it (offline, a private mirror), built from the task's
        own Dockerfile and tagged with the image's name, so a verifier image built FROM it finds it too."""
        import docker

        assert spec.image is not None
        with self._image_lock(f"fallback {spec.image}"):
            if self._has_image(spec.image):
                return
            try:
                self._pull(spec.image)
                return
            except InfraError as exc:
                reason = str(exc)
            built = self._build_once(spec)
            repository, tag = docker.utils.parse_repository_tag(spec.image)
            self.client.api.tag(built, repository, tag or "latest")
            if spec.log_dir:
                with open(spec.log_dir / "build.log", "a", encoding="utf-8") as log:
                    log.write(f"{reason}\nbuilt {built} from {spec.build_context} instead, tagged {spec.image}\n")
            self._ready.add(spec.image)

    def _check_build_bases(self, spec: SandboxSpec) -> None:
        """Before the run: each image a task's Dockerfile builds FROM is local or in its registry; else one
        line on how to have it (the offline base is built, never pulled)."""
        import docker

        assert spec.build_context is not None
        dockerfile = (spec.build_context / "Dockerfile").read_text(encoding="utf-8", errors="replace")
        for base in base_images(dockerfile, spec.build_args):
            if base in self._bases_checked or base in self._fallbacks or self._has_image(base):
                continue
            try:
                self.client.api.inspect_distribution(base)
            except docker.errors.APIError as exc:
                raise UserError(f"task '{spec.name}' builds FROM '{base}', which is neither on this Docker engine nor "
                                f"in its registry ({one_line(getattr(exc, 'explanation', None) or exc)[:160]}); make it "
                                "available, or choose another base with the recipe's build_args (the demo, offline: "
                                "scripts/build-base-image.sh, then export AGENTCOMPASS_BASE_IMAGE=agentcompass/base:bookworm)"
                                ) from exc
            self._bases_checked.add(base)

    def service_image(self, service: ContainerSpec, log_dir: Path | None) -> str:
        """A compose service's image: pulled, or built (its log is build-SERVICE.log)."""
        if service.build_context is None:
            self._pull(str(service.image))
            return str(service.image)
        return self._build(service.build_context, log_dir, service.dockerfile, service.build_args,
                           log_name=f"build-{service.name}.log")

    def egress_image(self, log_dir: Path | None) -> str:
        """The egress proxy's image, built once per engine from agentcompass/providers/docker/egress_proxy."""
        return self._build(EGRESS_CONTEXT, log_dir, build_args={"BASE_IMAGE": self.settings.egress_base_image},
                           log_name="build-egress.log")

    def _start_services(self, spec: SandboxSpec) -> list[str]:
        create_network(self.client.api, spec)
        try:
            return start_services(self, spec)
        except BaseException:
            remove_services(self.client.api, spec.name, [], volume_names(spec))
            raise

    def _pull(self, image: str) -> None:
        import docker

        with self._image_lock(image):
            if self._has_image(image):
                return
            repository, tag = docker.utils.parse_repository_tag(image)
            deadline = time.monotonic() + self.settings.pull_timeout_s
            try:
                for event in self.client.api.pull(repository, tag=tag or "latest", stream=True, decode=True):
                    if "error" in event:
                        raise InfraError(pull_failure(image, event["error"]))
                    if time.monotonic() > deadline:
                        raise InfraError(pull_failure(image, f"no complete pull within {self.settings.pull_timeout_s:.0f}s"))
            except docker.errors.APIError as exc:
                raise InfraError(pull_failure(image, exc)) from exc
            self._ready.add(image)

    def _build(self, context: Path, log_dir: Path | None, dockerfile: str = "Dockerfile",
               build_args: dict[str, str] | None = None, log_name: str = "build.log") -> str:
        # A Harbor task builds environment/, a Terminal-Bench task its own directory.
        task = context.parent.name if context.name == "environment" else context.name
        args = sorted((build_args or {}).items())
        key = (context, dockerfile, tuple(args))
        with self._lock:
            tag = self._tags.get(key)
        if tag is None:
            # The base images' ids are part of the identity: a rebuilt base means a rebuilt task image.
            recipe = f"{context_digest(context)}\n{self._base_ids(context / dockerfile, dict(args))}\n{dockerfile}\n{args}"
            identity = hashlib.sha256(recipe.encode()).hexdigest()
            tag = f"agentcompass-task/{repository_name(task)}:{identity[:16]}"
            with self._lock:
                self._tags[key] = tag
        build_log = log_dir / log_name if log_dir else None
        # One build per tag at a time: concurrent trials of a task wait for the first to build it.
        with self._image_lock(tag):
            if self._has_image(tag):
                if build_log:
                    build_log.write_text(f"image {tag} (cached: the task's environment did not change)\n")
                return tag
            # A real file even without a log dir: the build process writes into it directly.
            log = open(build_log, "w+", encoding="utf-8", errors="replace") if build_log else tempfile.TemporaryFile("w+")
            with log:
                log.write(f"building {tag} from {context}\n")
                build_image(self.client.api, BuildRequest(context, dockerfile, args, tag, task), log,
                            self.settings.buildkit, self.settings.build_timeout_s)
            self._ready.add(tag)
            return tag

    def interrupt(self) -> None:
        """Ctrl-C: end every image build in flight (the sandboxes are closed by the runner)."""
        BUILDS.kill_all()

    def _base_ids(self, dockerfile: Path, build_args: dict[str, str]) -> str:
        """The local image ids of the Dockerfile's FROM images (`missing` for one the build will pull)."""
        import docker

        ids = []
        for ref in base_images(dockerfile.read_text(encoding="utf-8", errors="replace"), build_args):
            try:
                ids.append(self.client.api.inspect_image(ref)["Id"])
            except docker.errors.ImageNotFound:
                ids.append(f"missing:{ref}")
        return ",".join(ids)


def from_images(dockerfile: str) -> list[str]:
    """The images a Dockerfile builds FROM, without `scratch` and its own stages (`FROM x AS name`)."""
    stages: set[str] = set()
    images = []
    for line in dockerfile.splitlines():
        words = [w for w in line.split() if not w.startswith("--")]
        if len(words) < 2 or words[0].upper() != "FROM":
            continue
        ref = words[1]
        if ref.lower() != "scratch" and ref not in stages:
            images.append(ref)
        if len(words) >= 4 and words[2].upper() == "AS":
            stages.add(words[3])
    return images


def base_images(dockerfile: str, build_args: dict[str, str]) -> list[str]:
    """from_images with `${NAME}` / `$NAME` filled in from the build args, else the ARG's default."""
    values = {}
    for line in dockerfile.splitlines():
        words = line.split(None, 1)
        if len(words) == 2 and words[0].upper() == "ARG":
            name, _, default = words[1].strip().partition("=")
            values[name] = default.strip().strip('"')
    values.update(build_args)
    return [re.sub(r"\$\{?(\w+)\}?", lambda m: values.get(m[1], m[0]), ref) for ref in from_images(dockerfile)]


def can_build(spec: SandboxSpec) -> bool:
    """The spec names a Dockerfile to build its image from (beside, or instead of, a registry image)."""
    return spec.build_context is not None and spec.compose is None and (spec.build_context / "Dockerfile").is_file()


def storage_lack(info: dict[str, Any]) -> str | None:
    """Why the engine's storage driver cannot cap a container's disk (--storage-opt size), None when it can:
    btrfs, zfs, devicemapper and windowsfilter can; overlay2 only over xfs (mounted with pquota)."""
    driver = str(info.get("Driver") or "unknown")
    backing = dict((info.get("DriverStatus") or [])).get("Backing Filesystem", "unknown")
    if driver in ("btrfs", "zfs", "devicemapper", "windowsfilter") or (driver == "overlay2" and backing == "xfs"):
        return None
    return f"its {driver} storage driver on {backing} sets no disk size"


def pull_failure(image: str, answer: Any) -> str:
    explanation = getattr(answer, "explanation", None) or answer
    return (f"cannot pull image '{image}': {one_line(explanation)[:300]}; make it available to the engine "
            "(docker pull / docker build) or run another with --env-params '{\"image\": \"NAME\"}'")


def repository_name(task: str) -> str:
    """A task id as a docker repository path component: lowercase [a-z0-9] separated by . _ -."""
    name = re.sub(r"[^a-z0-9._-]+", "-", task.lower())
    return re.sub(r"^[._-]+|[._-]+$", "", name) or "task"


def context_digest(context: Path) -> str:
    """sha256 over every file's path, exec bit and content (symlinks by target): the image's identity."""
    digest = hashlib.sha256()
    for path in sorted(context.rglob("*")):
        rel = path.relative_to(context).as_posix()
        if path.is_symlink():
            digest.update(f"L {rel} {os.readlink(path)}\0".encode())
        elif path.is_file():
            digest.update(f"F {rel} {os.access(path, os.X_OK)}\0".encode())
            digest.update(hashlib.sha256(path.read_bytes()).digest())
        elif path.is_dir():
            digest.update(f"D {rel}\0".encode())
    return digest.hexdigest()


class DockerSandbox(RemoteSandbox):
    def __init__(self, client: "docker.DockerClient", container_id: str, spec: SandboxSpec,
                 settings: DockerProvider.Settings, has_task_image: bool = True, egress: Egress | None = None) -> None:
        super().__init__(spec, settings, has_task_image)
        self.client = client
        self.api = client.api
        self.id = container_id
        self.egress = egress  # an allowlist task's network and proxy

    def attach_hint(self) -> str:
        host = f"DOCKER_HOST={os.environ['DOCKER_HOST']} " if os.environ.get("DOCKER_HOST") else ""
        return f"{host}docker exec -it {self.spec.name} bash   (remove it with: {host}docker rm -f {self.spec.name})"

    # -- exec ----------------------------------------------------------------------------
    def exec(
        self, cmd: str, *, cwd: str | None = None, env: dict[str, str] | None = None, timeout: float | None = None,
        user: str | None = None,
    ) -> ExecResult:
        return self._exec_in(self.id, self.settings.shell, cmd, cwd or self.spec.workdir, env, timeout, user)

    def _exec_in(self, container: str, shell: str, cmd: str, cwd: str | None, env: dict[str, str] | None,
                 timeout: float | None, user: str | None) -> ExecResult:
        import docker

        if self._closed:
            raise InfraError("sandbox is closed")
        mark = f"{EXEC_MARK}={uuid.uuid4().hex}"
        start = time.monotonic()
        try:
            exec_id = self.api.exec_create(
                container, [shell, "-c", cmd], workdir=cwd,
                environment={**(env or {}), EXEC_MARK: mark.partition("=")[2]}, user=user or "",
            )["Id"]
            sock = self.api.exec_start(exec_id, socket=True)
        except docker.errors.APIError as exc:
            raise self._failure(f"exec in {self.spec.name} failed", exc) from exc
        deadline = start + timeout if timeout else None
        keep = self.settings.output_cap_bytes + 1  # one byte more than the cap, so cap_output marks the cut
        stdout, stderr, timed_out, broken = read_frames(sock, deadline, keep, lambda: self._kill_marked(mark, container))
        code = 124 if timed_out else self._exit_code(exec_id)
        self._check_exit(code, broken)
        cap = self.settings.output_cap_bytes
        return ExecResult(code, cap_output(stdout, cap), cap_output(stderr, cap), timed_out, time.monotonic() - start)

    def set_network(self, mode: str, allowed_hosts: tuple[str, ...] = ()) -> None:
        """A phase's network (Harbor's network_mode): on the provider's network, or on none at all; with an
        egress proxy (an allowlist task), the phase's proxy as well."""
        import docker

        if self.egress:
            self.egress.enter(mode, allowed_hosts)
        network, wanted = self.settings.network, mode == "public"
        attached = network in self.api.inspect_container(self.id)["NetworkSettings"]["Networks"]
        try:
            if wanted and not attached:
                self.api.connect_container_to_network(self.id, network)
            elif attached and not wanted:
                self.api.disconnect_container_from_network(self.id, network)
        except docker.errors.APIError as exc:
            raise self._failure(f"cannot switch {self.spec.name} to network mode {mode}", exc) from exc

    def _kill_marked(self, mark: str, container: str | None = None) -> None:
        import docker

        try:
            kill_id = self.api.exec_create(container or self.id, ["/bin/sh", "-c", KILL_MARKED, mark], user="root")["Id"]
            self.api.exec_start(kill_id)
        except docker.errors.APIError:
            pass  # the container is gone: so is the command

    def _exit_code(self, exec_id: str) -> int:
        import docker

        # The stream can end a moment before the engine records the exit code.
        for _ in range(50):
            try:
                info = self.api.exec_inspect(exec_id)
            except docker.errors.APIError as exc:
                raise self._failure(f"exec in {self.spec.name} vanished", exc) from exc
            if not info.get("Running") and info.get("ExitCode") is not None:
                return int(info["ExitCode"])
            time.sleep(0.02)
        raise self._failure(f"exec in {self.spec.name} ended its output but reports no exit code")

    # -- a lost container ------------------------------------------------------------------
    def _lost(self) -> str | None:
        """None while the container runs; else what became of it (removed, exited, OOM-killed, ...)."""
        import docker

        try:
            state = self.api.inspect_container(self.id)["State"]
        except docker.errors.NotFound:
            return f"container {self.spec.name} was removed"
        except docker.errors.APIError:
            return None  # the engine is in trouble, not necessarily the container: an ordinary infra error
        if state.get("Status") == "running":
            return None
        return (f"container {self.spec.name} is {state.get('Status')} (exit code {state.get('ExitCode')}, "
                f"OOMKilled {bool(state.get('OOMKilled'))})")

    def details(self) -> dict[str, Any]:
        """For the trial's details: the engine's OOMKilled flag and how many processes the kernel killed
        for exceeding the container's memory limit (a running container's count: the agent's own doing)."""
        state = self.api.inspect_container(self.id)["State"]
        counters = self.exec(OOM_KILLS, timeout=30).stdout.split()
        return {"oom_killed": bool(state.get("OOMKilled")), "oom_kills": sum(int(n) for n in counters if n.isdigit())}

    # -- files ---------------------------------------------------------------------------
    def upload(self, local: Path, remote: str) -> None:
        """Copy a file or a directory's contents to `remote`, creating parent directories."""
        import docker

        buffer = io.BytesIO()
        upload_archive(local, remote, buffer)
        try:
            self.api.put_archive(self.id, "/", buffer.getvalue())
        except docker.errors.APIError as exc:
            raise self._failure(f"upload of {local} to {remote} failed", exc) from exc

    def download(self, remote: str, local: Path) -> None:
        """Copy `remote` (a file, or a directory's contents) to `local`; FileNotFoundError when it is missing."""
        self._download(self.id, remote, local)

    def _download(self, container: str, remote: str, local: Path) -> None:
        import docker

        try:
            stream, _ = self.api.get_archive(container, remote)
        except docker.errors.NotFound as exc:
            self._raise_if_lost()  # a removed container has no files either: that is not the task's verdict
            raise FileNotFoundError(remote) from exc
        except docker.errors.APIError as exc:
            raise self._failure(f"download of {remote} failed", exc) from exc
        with tempfile.SpooledTemporaryFile(max_size=16 * 1024 * 1024) as spool:
            for chunk in stream:
                spool.write(chunk)
            spool.seek(0)
            with tarfile.open(fileobj=spool, mode="r") as archive:
                extract_renamed(archive, local)

    def close(self) -> None:
        """Remove the container (and its anonymous volumes); nothing else. Safe to call twice."""
        import docker

        if not self._close_once():
            return
        try:
            self.api.remove_container(self.id, force=True, v=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            if "already in progress" not in str(exc):
                raise InfraError(f"cannot remove container {self.spec.name}: {one_line(exc.explanation or exc)}") from exc
        finally:
            if self.egress:
                self.egress.close()


class ComposeSandbox(DockerSandbox):
    """The client of a compose task: closing it also removes the trial's services, network and volumes."""

    def __init__(self, client: "docker.DockerClient", container_id: str, spec: SandboxSpec,
                 settings: DockerProvider.Settings, services: list[str], has_task_image: bool = True) -> None:
        super().__init__(client, container_id, spec, settings, has_task_image)
        self.services = services  # the other services' containers

    def download_from_service(self, service: str, remote: str, local: Path) -> None:
        """download from one of the trial's other services (a sidecar's artifact)."""
        self._download(f"{self.spec.name}-{service}", remote, local)

    def stop_client(self) -> None:
        """Stop the agent's container, keeping the services (and its files, for nothing more is read from it): a
        separate verifier's task collects its sidecars' evidence with no agent process left running, as Harbor."""
        import docker

        self.client_stopped = True
        try:
            self.api.stop(self.id, timeout=10)
        except docker.errors.APIError as exc:
            raise self._failure(f"cannot stop {self.spec.name}", exc) from exc

    def _lost(self) -> str | None:
        return None if getattr(self, "client_stopped", False) else super()._lost()

    def exec_in_service(self, service: str, cmd: str, *, timeout: float | None = None, user: str | None = None) -> ExecResult:
        """exec in one of the trial's other services (Harbor's [[verifier.collect]] in a sidecar), with `sh` (a
        sidecar's image need not have bash) in the service's own working directory, as `docker compose exec`."""
        return self._exec_in(f"{self.spec.name}-{service}", "sh", cmd, None, None, timeout, user)

    def close(self) -> None:
        try:
            super().close()
        finally:
            remove_services(self.api, self.spec.name, self.services, volume_names(self.spec))
