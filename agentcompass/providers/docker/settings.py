"""The docker env's settings (`providers/docker.yaml`, `--env-params`): a leaf, so the provider, its images
and its sandboxes all read one model without importing each other."""

from __future__ import annotations

import os
from typing import Literal

from pydantic import AliasChoices, Field

from agentcompass.core.sandbox import DEFAULT_OUTPUT_CAP
from agentcompass.core.schema import Positive, PositiveInt, Strict


class DockerSettings(Strict):
    image: str | None = None  # run-wide image for every task, instead of the task's own
    # For tasks that allow internet (the others get `none`). None: a bridge network of the run's own with
    # inter-container traffic off, so no trial reaches another or the user's other containers; a name: that
    # network as it is (the engine's `bridge` lets every container on it reach every other).
    network: str | None = None
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
    # Processes (threads included) a trial's container may hold at once: a fork bomb stops there. 0: no limit.
    pids_limit: int = Field(4096, ge=0)
    # no-new-privileges on every trial's container: a setuid binary (sudo, su) cannot raise an agent's privileges.
    no_new_privileges: bool = True
    # A compose task's `privileged`, `cap_add` or `network_mode: host` (on the agent's container or a sidecar) is
    # refused unless this is true: each hands the agent this host.
    allow_privileged: bool = False
    # What the egress proxy of allowlist tasks is built FROM (it apt-installs tinyproxy).
    egress_base_image: str = Field(default_factory=lambda: os.environ.get("AGENTCOMPASS_BASE_IMAGE") or "debian:bookworm-slim")
