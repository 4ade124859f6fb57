"""The images the docker provider runs: a run-wide override, the task's registry image (pulled when missing,
built from the task's Dockerfile where no registry has it) or the task's environment/Dockerfile built
under a content-hash tag, so an unchanged task is never rebuilt. Each image is pulled or built once per
engine however many trials want it, and a failed build is reported once and never retried."""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Callable

from agentcompass.core.errors import BuildFailed, InfraError, UserError
from agentcompass.core.sandbox import ContainerSpec, SandboxSpec
from agentcompass.providers.docker.build import BuildRequest, build_image
from agentcompass.providers.docker.egress import CONTEXT as EGRESS_CONTEXT
from agentcompass.providers.docker.settings import DockerSettings
from agentcompass.providers.remote import one_line

if TYPE_CHECKING:
    import docker


class DockerImages:
    """One engine's images for one provider: what is known to be present, the build tags, the checks made."""

    def __init__(self, client: Callable[[], "docker.DockerClient"], settings: DockerSettings) -> None:
        self._client = client  # the provider's, connected on first use
        self.settings = settings
        self._lock = threading.Lock()
        self._image_locks: dict[str, threading.Lock] = {}
        self._ready: set[str] = set()  # images known to be present on the engine
        self._tags: dict[tuple[Path, str, tuple[Any, ...]], str] = {}  # (context, Dockerfile, build args) -> content-hash tag
        self._registry_checked = False
        self._bases_checked: set[str] = set()  # FROM images found in their registry before the run
        self._fallbacks: set[str] = set()  # images to build from the task's Dockerfile, as no registry has them
        self._failed_builds: dict[str, str] = {}  # build context and args -> the failure, reported once

    @property
    def client(self) -> "docker.DockerClient":
        return self._client()

    def _image_lock(self, image: str) -> threading.Lock:
        with self._lock:
            return self._image_locks.setdefault(image, threading.Lock())

    def has_image(self, image: str) -> bool:
        import docker

        if image in self._ready:
            return True
        try:
            self.client.api.inspect_image(image)
        except docker.errors.ImageNotFound:
            return False
        self._ready.add(image)
        return True

    # -- before the run ------------------------------------------------------------------
    def check(self, spec: SandboxSpec) -> None:
        """The task has an image, and a missing image exists in its registry (or can be built instead)."""
        import docker

        image = self.settings.image or spec.image
        if image is None:
            if spec.build_context is None:
                raise UserError(f"task '{spec.name}' names no image and has no environment/Dockerfile; "
                                "pass one with --env-params '{\"image\": \"NAME\"}'")
            self.check_build_bases(spec)
            return
        if self._registry_checked or self.has_image(image) or image in self._fallbacks:
            return
        # Ask the registry about the first missing image: a wrong name or an unreachable registry
        # stops the run here; the pulls themselves happen in the trials, in parallel.
        try:
            self._probe_registry(image)
        except docker.errors.APIError as exc:
            if not self.settings.image and can_build(spec):  # as Harbor builds environment/Dockerfile instead
                self.check_build_bases(spec)
                self._fallbacks.add(image)
                return
            raise UserError(pull_failure(image, exc)) from exc
        self._registry_checked = True

    def check_build_bases(self, spec: SandboxSpec) -> None:
        """Each image a task's Dockerfile builds FROM is local or in its registry; else one line on how to
        have it (the offline base is built, never pulled)."""
        import docker

        assert spec.build_context is not None
        dockerfile = (spec.build_context / "Dockerfile").read_text(encoding="utf-8", errors="replace")
        for base in base_images(dockerfile, spec.build_args):
            if base in self._bases_checked or base in self._fallbacks or self.has_image(base):
                continue
            try:
                self._probe_registry(base)
            except docker.errors.APIError as exc:
                raise UserError(f"task '{spec.name}' builds FROM '{base}', which is neither on this engine nor "
                                f"in its registry ({one_line(getattr(exc, 'explanation', None) or exc)[:160]}); make it "
                                "available, or choose another base with the recipe's build_args (the demo, offline: "
                                "scripts/build-base-image.sh, then export AGENTCOMPASS_BASE_IMAGE=agentcompass/base:bookworm)"
                                ) from exc
            self._bases_checked.add(base)

    def _probe_registry(self, image: str) -> None:
        """Ask the image's registry whether it has `image`, pulling nothing; the engine's APIError when not."""
        self.client.api.inspect_distribution(image)

    # -- in a trial ----------------------------------------------------------------------
    def image_for(self, spec: SandboxSpec) -> tuple[str, bool]:
        """The image to run and whether it is the task's own (then it already holds the task's files)."""
        if self.settings.image:
            self.pull(self.settings.image)
            return self.settings.image, False
        if spec.image:
            if can_build(spec):
                self._pull_or_build(spec)
            else:
                self.pull(spec.image)
            return spec.image, True
        if spec.build_context is None:
            raise InfraError(f"sandbox {spec.name} has no image and no Dockerfile to build")
        client = spec.compose.client if spec.compose else None
        if client:
            return self.build(spec.build_context, spec.log_dir, client.dockerfile, client.build_args), True
        return self._build_once(spec), True

    def service_image(self, service: ContainerSpec, log_dir: Path | None) -> str:
        """A compose service's image: pulled, or built (its log is build-SERVICE.log)."""
        if service.build_context is None:
            self.pull(str(service.image))
            return str(service.image)
        return self.build(service.build_context, log_dir, service.dockerfile, service.build_args,
                          log_name=f"build-{service.name}.log")

    def egress_image(self, log_dir: Path | None) -> str:
        """The egress proxy's image, built once per engine from agentcompass/providers/docker/egress_proxy."""
        return self.build(EGRESS_CONTEXT, log_dir, build_args={"BASE_IMAGE": self.settings.egress_base_image},
                          log_name="build-egress.log")

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
            return self.build(spec.build_context, spec.log_dir, build_args=spec.build_args, log_name=log_name)
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
            if self.has_image(spec.image):
                return
            try:
                self.pull(spec.image)
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

    def pull(self, image: str) -> None:
        import docker

        with self._image_lock(image):
            if self.has_image(image):
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

    def build(self, context: Path, log_dir: Path | None, dockerfile: str = "Dockerfile",
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
            if self.has_image(tag):
                if build_log:
                    build_log.write_text(f"image {tag} (cached: the task's environment did not change)\n")
                return tag
            # A real file even without a log dir: the build process writes into it directly.
            log = open(build_log, "w+", encoding="utf-8", errors="replace") if build_log else tempfile.TemporaryFile("w+")
            with log:
                log.write(f"building {tag} from {context}\n")
                self._build_image(BuildRequest(context, dockerfile, args, tag, task), log)
            self._ready.add(tag)
            return tag

    def _build_image(self, request: BuildRequest, log: IO[str]) -> None:
        """One build, its output into `log` (build.py: BuildKit through the docker CLI, else the legacy builder)."""
        build_image(self.client.api, request, log, self.settings.buildkit, self.settings.build_timeout_s)

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
