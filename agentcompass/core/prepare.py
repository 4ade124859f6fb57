"""A run prepared: its tasks loaded, its format, harness, provider and model checked, its run directory
chosen, all before a byte is written (bad input is one line and exit 2, nothing written)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentcompass.core.errors import UserError
from agentcompass.core.fingerprint import fingerprint
from agentcompass.core.limits import scaled
from agentcompass.core.registry import load, resolve
from agentcompass.core.run_dir import refuse_if_in_use, resume_target
from agentcompass.core.schema import SPEND_CAPS, ResolvedConfig
from agentcompass.core.shard_policy import check_processes
from agentcompass.core.task import Task
from agentcompass.core.contracts import TaskFormat, check_agent_tools


@dataclass
class PreparedRun:
    """Everything checked before a byte is written."""

    resolved: ResolvedConfig
    task_format: TaskFormat
    tasks: list[Task]
    provider: Any
    harness: Any
    run_dir: Path
    fingerprint: dict[str, Any]
    run_info: dict[str, Any] = field(default_factory=dict)  # more for run.json (a regrade: the run it regrades)
    trial_runner: Any = None  # a TrialRunner subclass running each attempt (a regrade's replay); None: TrialRunner


def prepare(resolved: ResolvedConfig, harness_name: str | None = None) -> PreparedRun:
    recipe = resolved.benchmark
    task_format = resolve("format", recipe.format)(recipe)
    tasks = [scaled(task, resolved.run) for task in task_format.load()]  # the run's timeout multipliers and caps
    harness_cfg = resolved.harness
    harness_cls = resolve("harness", harness_name or harness_cfg.impl or harness_cfg.name)
    check_agent_tools(harness_cls, harness_name or harness_cfg.name, tasks)
    env = resolved.env
    provider = resolve("provider", env.impl or env.name)(**resolved.settings_of(env), keep=resolved.run.keep_environment)
    check_processes(resolved, provider, harness_cls)
    check_harness = getattr(provider, "check_harness", None)  # e.g. local: a model's commands need a fence
    if check_harness is not None:
        check_harness(harness_cls, harness_name or harness_cfg.name)
    check_env = getattr(task_format, "check_env", None)  # a format may need what only some envs offer (coop)
    if check_env is not None:
        check_env(provider)
    check_each_task(tasks, task_format, provider, env.name)
    needs_model = getattr(harness_cls, "needs_model", False)
    if needs_model and resolved.model.name == "none":
        raise UserError(f"harness '{harness_cfg.name}' needs a model; pass a preset (agentcompass list models) or a provider/model string")
    if needs_model:
        from agentcompass.core.models import check_model

        check_model(resolved.model, request=False)  # a missing key: before anything slow
    # The run directory's refusals come before the model request and the harness, which may import litellm (seconds).
    prints = fingerprint(resolved, provider, [t.id for t in tasks])
    run_dir = resume_target(resolved, prints)
    refuse_if_in_use(run_dir)
    uses_gateway = getattr(harness_cls, "uses_gateway", False)
    if needs_model and not uses_gateway:  # before the harness, which may import litellm (seconds of CPU)
        from agentcompass.core.models import check_model

        check_model(resolved.model, request=resolved.run.model_check)
    harness = harness_cls(**resolved.settings_of(harness_cfg))
    check_tasks = getattr(harness, "check_tasks", None)  # e.g. predictions: refuse a file for another benchmark
    if check_tasks is not None:
        check_tasks(tasks)
    if uses_gateway:
        load("service", "gateway_check")(resolved, tasks, provider)
    elif caps := [f"run.{name}" for name in SPEND_CAPS if getattr(resolved.run, name) is not None]:
        raise UserError(f"{', '.join(caps)}: spend caps are enforced at the model gateway, which harness "
                        f"'{harness_cfg.name}' does not use; remove them (mini_swe_agent: harness.cost_limit and "
                        "harness.step_limit cap each attempt)")
    if needs_model:
        from agentcompass.core.models import check_model, litellm_name

        api_kind = getattr(harness, "api_kind", None)  # an agent calling through the gateway: its URL and API
        via_gateway = uses_gateway and api_kind is not None
        if uses_gateway:  # the others were checked before the harness was made
            check_model(resolved.model, request=resolved.run.model_check and not via_gateway)
        if via_gateway and resolved.run.model_check:
            load("service", "endpoint_check")(resolved.model, api_kind(resolved.model))
        resolved.labels["model_name"] = litellm_name(resolved.model)  # as mini-swe-agent names it in predictions
    fetch = getattr(harness, "prepare", None)  # big downloads (an installed CLI's bundle) only once all else passed
    if fetch is not None:
        fetch()
    return PreparedRun(resolved, task_format, tasks, provider, harness, run_dir, prints)


def check_each_task(tasks: list[Task], task_format: TaskFormat, provider: Any, env_name: str) -> None:
    """Each task against the env (its sandbox, and a fresh grading sandbox where it has one). A task the format or
    the env cannot run is refused alone: its trials record why, the others run, and one warning line names it.
    A run whose every task is refused is refused itself (one line, exit 2), as nothing would run."""
    grading_spec = getattr(task_format, "grading_spec", None)
    for task in tasks:
        if task.refusal:
            continue
        spec = task.sandbox_spec(task.id, {}, None)
        try:
            for checked in (spec, grading_spec(task, spec) if grading_spec else None):
                if checked is not None:
                    provider.check(checked)
        except UserError as exc:
            task.refusal = str(exc)
    refused = [task for task in tasks if task.refusal]
    if refused and len(refused) == len(tasks):
        raise UserError(str(refused[0].refusal))
    for task in refused:
        line = f"warning: task '{task.id}' is refused on {env_name} and recorded as an error: {task.refusal}"
        if line not in REFUSALS_SHOWN:  # validate prepares a run per harness: say it once
            REFUSALS_SHOWN.add(line)
            print(line, file=sys.stderr, flush=True)


REFUSALS_SHOWN: set[str] = set()
