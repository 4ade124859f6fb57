"""The run's timeout multipliers and caps, with Harbor's names and arithmetic, applied to each task's limits.

Harbor 0.26 (harbor/trial/trial.py `_resolve_timeout_sec`): a phase's limit is min(base, cap) x multiplier, where
the multiplier is the phase's own (`agent_timeout_multiplier`, `verifier_timeout_multiplier`,
`agent_setup_timeout_multiplier`, `environment_build_timeout_multiplier`) or else `timeout_multiplier`, and the
caps are the agent's and the verifier's `max_timeout_sec`. A harness's own agent limit (an installed CLI's
`timeout_s`, Harbor's `override_timeout_sec`) replaces the task's base and is capped and multiplied the same way
(Task.agent_limit_s). Applied once to the loaded tasks, before the run's
fingerprint, so every harness, format and provider reads the effective limits from the task.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentcompass.core.schema import RunConfig
    from agentcompass.core.task import Task

MULTIPLIERS = ("timeout_multiplier", "agent_timeout_multiplier", "verifier_timeout_multiplier",
               "agent_setup_timeout_multiplier", "environment_build_timeout_multiplier")
CAPS = ("agent_max_timeout_sec", "verifier_max_timeout_sec")
SETTINGS = (*MULTIPLIERS, *CAPS)


def resolve(base: float | None, multiplier: float | None, default: float, cap: float | None = None) -> float | None:
    """min(base, cap) x (the phase's multiplier, else the run's); no limit stays no limit."""
    if base is None:
        return None
    return min(base, cap or float("inf")) * (multiplier if multiplier is not None else default)


def scaled(task: "Task", run: "RunConfig") -> "Task":
    """The task with its effective limits: agent, verifier, environment build (and a Harbor task's steps), and the
    factor its harness applies to its own setup limit (an installed CLI's install)."""
    if not changes_limits(run):
        return task
    m = run.timeout_multiplier

    def agent(base: float | None) -> float | None:
        return resolve(base, run.agent_timeout_multiplier, m, run.agent_max_timeout_sec)

    def verify(base: float | None) -> float | None:
        return resolve(base, run.verifier_timeout_multiplier, m, run.verifier_max_timeout_sec)

    data = task.data
    if data.get("steps"):  # Harbor [[steps]] with limits of their own
        data = {**data, "steps": [{**step, "agent_timeout_s": agent(step.get("agent_timeout_s")),
                                   "verify_timeout_s": verify(step.get("verify_timeout_s"))}
                                  for step in data["steps"]]}
    setup = run.agent_setup_timeout_multiplier
    return replace(task, agent_timeout_s=agent(task.agent_timeout_s), verify_timeout_s=verify(task.verify_timeout_s),
                   build_timeout_s=resolve(task.build_timeout_s, run.environment_build_timeout_multiplier, m),
                   agent_setup_scale=setup if setup is not None else m, data=data,
                   agent_timeout_scale=run.agent_timeout_multiplier if run.agent_timeout_multiplier is not None else m,
                   agent_timeout_cap_s=run.agent_max_timeout_sec)


def changes_limits(run: "RunConfig") -> bool:
    return run.timeout_multiplier != 1.0 or any(getattr(run, key) is not None for key in SETTINGS[1:])


def fingerprint_part(run: "RunConfig") -> dict[str, Any]:
    """The settings that change a limit, as the fingerprint records them: only those set, so a run made before
    they existed (or without them) resumes as it was."""
    found: dict[str, Any] = {}
    if run.timeout_multiplier != 1.0:
        found["timeout_multiplier"] = run.timeout_multiplier
    for key in SETTINGS[1:]:
        if getattr(run, key) is not None:
            found[key] = getattr(run, key)
    return found
