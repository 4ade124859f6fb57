"""What task formats produce and what harnesses and graders return."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from pydantic import BaseModel, Field

from agentcompass.core.sandbox import ComposeSpec, SandboxSpec


LIFETIME_MARGIN_S = 600.0


@dataclass
class Task:
    id: str
    instruction: str
    workdir: str = "/app"
    image: str | None = None
    build_context: Path | None = None
    build_args: dict[str, str] = field(default_factory=dict)  # the Dockerfile's ARGs
    runs_on_host: bool = False
    seed_dir: Path | None = None  # copied into the workdir where no image is built (local)
    setup_script: Path | None = None  # run in the workdir after seeding, where no image is built
    env: dict[str, str] = field(default_factory=dict)
    cpus: float | None = None
    memory_mb: int | None = None
    allow_internet: bool = True
    network_modes: tuple[str, ...] = ()  # see SandboxSpec
    users: dict[str, str] = field(default_factory=dict)  # see SandboxSpec
    agent_user: str | None = None  # who the agent's commands run as; None: the image's default user
    gpus: int = 0
    storage_mb: int | None = None
    agent_timeout_s: float | None = None
    verify_timeout_s: float | None = None
    build_timeout_s: float | None = None
    agent_setup_scale: float = 1.0  # the run's agent-setup timeout multiplier, for a harness's own setup limit
    agent_timeout_scale: float = 1.0  # the run's agent timeout multiplier and cap (core/limits.py), for a harness's
    agent_timeout_cap_s: float | None = None  # own agent limit in place of the task's (agent_limit_s)
    compose: ComposeSpec | None = None  # docker-compose services around the sandbox
    image_entrypoint: bool = True  # see SandboxSpec
    # What the task hands its agent beyond the shell, by field (Harbor's mcp_servers, skills_dir): only a
    # harness naming the field in its `task_tools` may run the task (see harnesses/base.py).
    agent_tools: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)  # format-specific payload
    # Why this task cannot run at all (a field agentcompass cannot honour): its trials record this as an error
    # and the run's other tasks go on. Set by the format at load or by the runner's check against the env.
    refusal: str | None = None

    def sandbox_spec(self, name: str, labels: dict[str, str], log_dir: Path | None,
                     harness_limit_s: float | None = None) -> SandboxSpec:
        return SandboxSpec(
            name=name,
            workdir=self.workdir,
            image=self.image,
            build_context=self.build_context,
            build_args=dict(self.build_args),
            runs_on_host=self.runs_on_host,
            env=dict(self.env),
            cpus=self.cpus,
            memory_mb=self.memory_mb,
            allow_internet=self.allow_internet,
            network_modes=self.network_modes,
            users=dict(self.users),
            gpus=self.gpus,
            storage_mb=self.storage_mb,
            labels=labels,
            lifetime_s=self.lifetime_s(harness_limit_s),
            log_dir=log_dir,
            compose=self.compose,
            image_entrypoint=self.image_entrypoint,
        )

    def agent_limit_s(self, own_s: float | None) -> float | None:
        """The agent's limit when a harness sets its own (an installed CLI's `timeout_s`, Harbor's
        `override_timeout_sec`): it replaces the task's base and, as Harbor takes it, is capped and multiplied as the
        task's is; None: the task's (already scaled)."""
        if own_s is None:
            return self.agent_timeout_s
        return min(own_s, self.agent_timeout_cap_s or float("inf")) * self.agent_timeout_scale

    def lifetime_s(self, harness_limit_s: float | None = None) -> float | None:
        """How long a sandbox may live at most: every phase's timeout plus a margin for staging; the agent's
        phase is the harness's own time limit when that is longer (mini_swe_agent's wall_time_limit_s).

        Cloud providers pass it to their platform, so a sandbox whose orchestrator died still ends."""
        agent = max(self.agent_timeout_s or 0, harness_limit_s or 0) or None
        phases = [self.build_timeout_s, agent, self.verify_timeout_s]
        if not any(phases):
            return None
        return sum(p or 0 for p in phases) + LIFETIME_MARGIN_S


def add_known(a: float | None, b: float | None) -> float | None:
    """A sum of figures some of which may be missing: None only when all are."""
    return None if a is None and b is None else (a or 0.0) + (b or 0.0)


def sum_known(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


class Usage(BaseModel):
    model_calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    tokens_cached: int = 0  # cache reads, part of tokens_in
    tokens_cache_write: int = 0  # cache writes (Anthropic), part of tokens_in
    cost_usd: float = 0.0
    cost_known: bool = True
    cli_cost_usd: float | None = None  # an installed CLI's own cost figure, beside cost_usd (the gateway's, priced)
    generation_s: float = 0.0  # time spent waiting for the model
    model_errors: int = 0  # model requests that failed (retried or given up on); their time is in generation_s

    def __add__(self, other: "Usage") -> "Usage":  # once per trial at least: without total()'s list and generators
        return Usage(
            model_calls=self.model_calls + other.model_calls, tokens_in=self.tokens_in + other.tokens_in,
            tokens_out=self.tokens_out + other.tokens_out, tokens_cached=self.tokens_cached + other.tokens_cached,
            tokens_cache_write=self.tokens_cache_write + other.tokens_cache_write,
            cost_usd=self.cost_usd + other.cost_usd, cost_known=self.cost_known and other.cost_known,
            cli_cost_usd=add_known(self.cli_cost_usd, other.cli_cost_usd),
            generation_s=self.generation_s + other.generation_s, model_errors=self.model_errors + other.model_errors,
        )

    @classmethod
    def total(cls, usages: Iterable["Usage"]) -> "Usage":
        """The sum of many, made once: `sum()` over thousands would build (and validate) one Usage per addition."""
        items = list(usages)
        return cls(
            model_calls=sum(u.model_calls for u in items),
            tokens_in=sum(u.tokens_in for u in items),
            tokens_out=sum(u.tokens_out for u in items),
            tokens_cached=sum(u.tokens_cached for u in items),
            tokens_cache_write=sum(u.tokens_cache_write for u in items),
            cost_usd=sum(u.cost_usd for u in items),
            cli_cost_usd=sum_known(u.cli_cost_usd for u in items),
            cost_known=all(u.cost_known for u in items),
            generation_s=sum(u.generation_s for u in items),
            model_errors=sum(u.model_errors for u in items),
        )


class AgentOutcome(BaseModel):
    exit_status: str = "completed"  # completed | submitted | timeout | limits_exceeded | ...
    submission: str | None = None  # e.g. the patch for SWE-bench
    usage: Usage = Field(default_factory=Usage)
    message: str = ""
    steps: list[dict[str, Any]] = Field(default_factory=list)  # a multi-step task's per-step grades, in order
    collected: dict[str, Any] = Field(default_factory=dict)  # what the format's collect step did (Harbor's hooks)


class Grade(BaseModel):
    passed: bool
    reward: float
    rewards: dict[str, float] = Field(default_factory=dict)
    message: str = ""
    details: dict[str, Any] = Field(default_factory=dict)
