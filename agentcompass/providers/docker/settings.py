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
