"""The provider/sandbox contract shared by every execution environment.

A sandbox is remote in general (docker, modal, gcp share no filesystem with the
orchestrator), so everything the core does inside it goes through exec, upload
and download. The local provider implements the same contract on the host.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from agentcompass.core.errors import AgentError, UserError

DEFAULT_OUTPUT_CAP = 10 * 1024 * 1024  # bytes kept per stream; the rest is dropped and marked
TRUNCATION_MARK = "\n[... output truncated by agentcompass ...]\n"


@dataclass
class SandboxSpec:
    """What a trial needs from its sandbox; providers map it onto their own API."""

    name: str  # unique per trial, safe for container names and labels
    workdir: str = "/app"
    image: str | None = None  # a registry image to run
    build_context: Path | None = None  # a directory with a Dockerfile to build instead
    build_args: dict[str, str] = field(default_factory=dict)  # the Dockerfile's ARGs (e.g. BASE_IMAGE)
    runs_on_host: bool = False  # the task's tools are the host's own: no image needed locally
    env: dict[str, str] = field(default_factory=dict)
    cpus: float | None = None
    memory_mb: int | None = None
    # vCPUs to reserve without capping (a request, no limit): the official SWE-bench grading on Modal asks
    # for cpu=4 Modal cores; providers without reservations (docker, local) ignore it.
    cpu_request: float | None = None
    allow_internet: bool = True
    # Harbor's per-phase network modes (public, no-network, allowlist) the sandbox switches between
    # with set_network; empty: allow_internet holds for the sandbox's whole life.
    network_modes: tuple[str, ...] = ()
    # users that commands run as (exec's `user`), by the field asking for them: {"[agent] user": "agent"}
    users: dict[str, str] = field(default_factory=dict)
    gpus: int = 0
    storage_mb: int | None = None  # a disk size limit, where the provider can set one
    labels: dict[str, str] = field(default_factory=dict)
    lifetime_s: float | None = None  # hard cap on the sandbox's life, for cloud providers
    log_dir: Path | None = None  # where the provider may write build logs for this trial
    compose: "ComposeSpec | None" = None  # docker-compose services: the sandbox is their `client`
    # The image's ENTRYPOINT runs, with the keep-alive as its arguments, as Harbor's and Terminal-Bench's compose
    # files run it (a service it starts is up for the agent and the tests). False: the keep-alive replaces it, as
    # an official harness that runs its own commands in the image does (CooperBench's ENTRYPOINT is its test runner).
    image_entrypoint: bool = True

    @property
    def needs_image(self) -> bool:
        return (self.image is not None or self.build_context is not None) and not self.runs_on_host


@dataclass
class ContainerSpec:
    """One docker-compose service: what its container runs and with what (all optional)."""

    name: str
    image: str | None = None
    build_context: Path | None = None
    dockerfile: str = "Dockerfile"
    build_args: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    entrypoint: list[str] | None = None  # None: the image's
    command: list[str] | None = None  # None: the image's
    user: str | None = None
    workdir: str | None = None
    tmpfs: dict[str, str] = field(default_factory=dict)  # mount point -> options (size=...)
    volumes: dict[str, str] = field(default_factory=dict)  # mount point -> volume name ("" = the container's own)
    privileged: bool = False
    cap_add: list[str] = field(default_factory=list)
    cpus: float | None = None
    memory_mb: int | None = None
    network_mode: str | None = None  # e.g. host, none; default: the trial's own network
    healthcheck: dict[str, Any] | None = None  # the engine's format (test, interval in ns, ...); waited for
    depends_on: dict[str, str] = field(default_factory=dict)  # service -> compose condition (service_healthy, ...)


@dataclass
class ComposeSpec:
    """The sandbox is the `client` service; the others run beside it on the trial's own network."""

    client: ContainerSpec
    services: list[ContainerSpec] = field(default_factory=list)
    # The services are part of the task (Harbor's sidecars): a provider without them refuses the task.
    # False: the client alone still runs the task (Terminal-Bench, whose tasks mostly have no others).
    required: bool = False


@dataclass
class ExecResult:
    exit_code: int
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


@runtime_checkable
class Sandbox(Protocol):
    def exec(
        self,
        cmd: str,
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float | None = None,
        user: str | None = None,  # None: the sandbox's default user; where users exist (docker), e.g. root
    ) -> ExecResult: ...

    def upload(self, local: Path, remote: str) -> None: ...

    # Copies `remote` (a file, or a directory's contents) to `local` without following any link out of it
    # (core/safe_files.py) and returns what was refused; FileNotFoundError when nothing is there.
    def download(self, remote: str, local: Path) -> list[str]: ...

    def close(self) -> None: ...


@runtime_checkable
class Provider(Protocol):
    name: str

    def check(self, spec: SandboxSpec) -> None:
        """Raise UserError before the run starts when this provider cannot serve the spec."""

    def open(self, spec: SandboxSpec) -> Sandbox: ...


def refusal(spec: SandboxSpec, provider: str, need: str, lack: str) -> UserError:
    """The one line that refuses a task before the run: what it needs, what this provider lacks, what to do."""
    return UserError(f"task '{spec.name}' needs {need}, which the {provider} provider cannot honour ({lack}); "
                     f"run it with another --env or leave the task out (--benchmark-params '{{\"sample_ids\": [...]}}')")


def compose_refusal(spec: SandboxSpec, provider: str) -> None:
    """A task whose docker-compose services are part of it (Harbor's sidecars) needs a provider that runs them."""
    if spec.compose and spec.compose.required and spec.compose.services:
        names = ", ".join(s.name for s in spec.compose.services)
        raise refusal(spec, provider, f"environment/docker-compose.yaml sidecar services ({names})",
                      "it runs one container per trial; --env docker runs them")


def uncapped_storage(spec: SandboxSpec, provider: str, why: str) -> None:
    """[environment] storage_mb where no disk cap can be set: the task runs on the provider's own disk, so it
    gets at least what it asks for (Harbor's size is what cloud sandboxes are given), never less. Said once
    per process and provider, not silently."""
    if not spec.storage_mb or provider in STORAGE_WARNED:
        return
    STORAGE_WARNED.add(provider)
    print(f"warning: task '{spec.name}' asks for [environment] storage_mb = {spec.storage_mb}, which the {provider} "
          f"provider cannot cap ({why}): such tasks run with the provider's disk (more, not less)",
          file=sys.stderr, flush=True)


STORAGE_WARNED: set[str] = set()


def common_refusals(spec: SandboxSpec, provider: str, *, gpus: bool = False, switch_network: bool = False,
                    compose: bool = False, allowlist: bool = False) -> None:
    """What most providers refuse alike: sidecars, GPUs they do not have, allowlists (no egress filter), phase switches."""
    if not compose:
        compose_refusal(spec, provider)
    if spec.gpus and not gpus:
        raise refusal(spec, provider, f"[environment] gpus = {spec.gpus}", "no GPUs")
    if "allowlist" in spec.network_modes and not allowlist:
        raise refusal(spec, provider, 'network_mode = "allowlist"', "no egress filter by host name")
    if len(spec.network_modes) > 1 and not switch_network:
        raise refusal(spec, provider, f"network_mode {' and '.join(spec.network_modes)} in different phases ([environment], [agent], [verifier])",
                      "the network is fixed when the sandbox opens")


def cap_output(data: bytes, cap: int = DEFAULT_OUTPUT_CAP) -> str:
    """Decode a stream, keeping at most `cap` bytes and marking the cut."""
    if len(data) <= cap:
        return data.decode("utf-8", errors="replace")
    return data[:cap].decode("utf-8", errors="replace") + TRUNCATION_MARK



def read_whole(sandbox: "Sandbox", remote: str) -> str:
    """A file of the sandbox, whole (decoded with replacement), where an exec's output would be capped:
    a patch or a submission (the official harnesses have no cap)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="agentcompass-fetch-") as tmp:
        local = Path(tmp) / "file"
        refused = sandbox.download(remote, local)
        if refused or not local.is_file():  # a link the agent put there: its doing, never an error to retry
            raise AgentError(f"{remote} is not a file the runner may read: {'; '.join(refused) or 'a directory'}")
        return local.read_bytes().decode("utf-8", errors="replace")
