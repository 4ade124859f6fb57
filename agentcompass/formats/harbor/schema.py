"""Harbor's task.toml, schema versions 1.0 to 1.4 (Harbor 0.26), as pydantic models.

Field names are Harbor's (harbor/models/task/config.py); defaults are Harbor's where the loader does not
need to tell "unset" apart. Deprecated spellings (`version`, `memory`, `storage`) are read and normalised.
Keys these models do not know are kept and listed by `unknown_fields`, so the loader can refuse them
(or, under [task] and [metadata], name them in a warning) instead of dropping them silently. How each
field is honoured: harbor_fields.py; the completeness test against Harbor's own models:
tests/conformance/test_harbor_schema_complete.py.
"""

from __future__ import annotations

from functools import cache
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

NetworkMode = Literal["public", "no-network", "allowlist"]


class Open(BaseModel):
    """Unknown keys are kept in model_extra, for the warning."""

    model_config = ConfigDict(extra="allow")


def size_mb(value: str | int) -> int:
    """"2G", "512M", "1024K" or a plain number of megabytes."""
    text = str(value).strip().upper().removesuffix("B")
    units = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(float(text))


class NetworkPolicy(Open):
    network_mode: NetworkMode | None = None
    allowed_hosts: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def allowlist_implied_by_hosts(self) -> "NetworkPolicy":
        if self.allowed_hosts and self.network_mode is None:
            self.network_mode = "allowlist"
        if self.allowed_hosts and self.network_mode != "allowlist":
            raise ValueError("allowed_hosts is only valid with network_mode = \"allowlist\"")
        return self


class Author(Open):
    name: str
    email: str | None = None


class PackageInfo(Open):
    """[task] (1.1+): the task's name in a registry."""

    name: str
    description: str = ""
    version: str | None = None
    authors: list[Author] = Field(default_factory=list)
    keywords: list[str] = Field(default_factory=list)


class Healthcheck(Open):
    """Docker HEALTHCHECK semantics: `retries` consecutive failures after the start period fail it."""

    command: str
    interval_sec: float = 5.0
    timeout_sec: float = 30.0
    start_period_sec: float = 0.0
    start_interval_sec: float = 5.0
    retries: int = 3


class MCPServer(Open):
    name: str
    transport: str = "sse"
    url: str | None = None
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    headers: dict[str, str] = Field(default_factory=dict)  # HTTP transports; values name ${VAR}s, never secrets


class Tpu(Open):
    """[environment.tpu] (1.4): a TPU slice; no provider here attaches one, so a task asking is refused."""

    type: str
    topology: str


class Environment(NetworkPolicy):
    build_timeout_sec: float | None = None
    docker_image: str | None = None
    os: str = "linux"
    workdir: str | None = None
    cpus: float | None = None
    memory_mb: int | None = None
    storage_mb: int | None = None
    gpus: int | None = 0
    gpu_types: list[str] | None = None
    tpu: Tpu | None = None
    allow_internet: bool = True
    mcp_servers: list[MCPServer] = Field(default_factory=list)
    env: dict[str, Any] = Field(default_factory=dict)
    skills_dir: str | None = None
    healthcheck: Healthcheck | None = None
    memory: str | None = None  # deprecated: memory_mb
    storage: str | None = None  # deprecated: storage_mb

    @model_validator(mode="after")
    def deprecated_sizes(self) -> "Environment":
        if self.memory is not None and self.memory_mb is None:
            self.memory_mb = size_mb(self.memory)
        if self.storage is not None and self.storage_mb is None:
            self.storage_mb = size_mb(self.storage)
        return self

    def baseline_network(self) -> NetworkMode:
        return self.network_mode or ("public" if self.allow_internet else "no-network")


class Agent(NetworkPolicy):
    timeout_sec: float | None = None
    user: str | int | None = None


class CollectHook(Open):
    """One [[verifier.collect]] entry: a command run in a compose service after the agent phase, before the
    artifacts are collected (DeepSWE's writes the agent's committed work to /logs/artifacts/model.patch)."""

    command: str
    service: str = "main"
    timeout_sec: float = 60.0
    user: str | int | None = None


class Verifier(NetworkPolicy):
    timeout_sec: float | None = None  # None: unset here (Harbor's default, 600 s, is the loader's)
    env: dict[str, Any] = Field(default_factory=dict)
    user: str | int | None = None
    environment_mode: Literal["shared", "separate"] | None = None
    environment: Environment | None = None
    collect: list[CollectHook] = Field(default_factory=list)


class Solution(Open):
    env: dict[str, Any] = Field(default_factory=dict)


class Artifact(Open):
    source: str
    destination: str | None = None
    exclude: list[str] = Field(default_factory=list)
    service: str | None = None  # a docker-compose service to collect it from; None: main (the agent's)


class Step(Open):
    """One [[steps]] entry (1.2+): its instruction, tests and solution live in steps/<name>/."""

    name: str
    agent: Agent = Field(default_factory=Agent)
    verifier: Verifier = Field(default_factory=Verifier)
    min_reward: float | dict[str, float] | None = None
    healthcheck: Healthcheck | None = None
    artifacts: list[str | Artifact] = Field(default_factory=list)


class TaskConfig(Open):
    schema_version: str = "1.0"
    task: PackageInfo | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    source: str | None = None
    agent: Agent = Field(default_factory=Agent)
    verifier: Verifier = Field(default_factory=Verifier)
    environment: Environment = Field(default_factory=Environment)
    solution: Solution = Field(default_factory=Solution)
    artifacts: list[str | Artifact] = Field(default_factory=list)
    steps: list[Step] | None = Field(default_factory=list)
    multi_step_reward_strategy: Literal["mean", "final"] | None = None  # None: "mean" for a multi-step task

    @model_validator(mode="before")
    @classmethod
    def version_renamed(cls, data: Any) -> Any:
        if isinstance(data, dict) and "version" in data:
            data = dict(data)
            data.setdefault("schema_version", data.pop("version"))
        if isinstance(data, dict):
            data.pop("multi_step_reward_mode", None)  # before 1.3; Harbor drops it too
        return data


def unknown_fields(model: BaseModel, prefix: str = "") -> list[str]:
    """Dotted paths of every key no model knows, in the order found ([metadata] is free-form).

    Only the fields that can hold a model and that the task.toml set are walked: a default (an empty
    [agent], say) holds no key of its own."""
    found = [f"{prefix}{key}" for key in (model.model_extra or {})]
    given = model.model_fields_set
    for name in nested_fields(type(model)):
        if name not in given:
            continue
        value = getattr(model, name)
        items = value if isinstance(value, list) else [value]
        for index, item in enumerate(items):
            if isinstance(item, BaseModel):
                where = f"{prefix}{name}[{index}]." if isinstance(value, list) else f"{prefix}{name}."
                found += unknown_fields(item, where)
    return found


@cache
def nested_fields(model: type[BaseModel]) -> tuple[str, ...]:
    """The fields of `model` whose type holds a model somewhere (Environment, list[Step], Healthcheck | None)."""
    def holds_model(annotation: Any) -> bool:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            return True
        return any(holds_model(arg) for arg in get_args(annotation))

    return tuple(name for name, info in model.model_fields.items() if holds_model(info.annotation))
