"""How agentcompass treats each field of Harbor's task.toml: the "agentcompass" column of
docs/formats/harbor-schema.md (scripts/harbor_schema_table.py) and the rule for keys Harbor does not define.

A note is looked up by the field's dotted path (`[]` for a list's items), the longest matching prefix
winning, so a table's note covers its fields unless one of them has its own.
"""

from __future__ import annotations

import re

# Keys under these may be anything without changing a verdict: an unknown one there gets a warning.
FREE_FORM = ("task", "metadata")

VERIFIER_ENV = "the separate verifier's sandbox, as [environment]'s for the agent's"
NOTES: dict[str, str] = {
    "schema_version": "read; 1.0 to 1.4 (`version` is the old spelling)",
    "task": "read, not used (the task's identity in a registry)",
    "metadata": "read, not used (free-form)",
    "source": "read, not used",
    "multi_step_reward_strategy": "honoured (`mean` when unset)",
    "solution": "honoured by the oracle",
    "solution.env": "honoured: the oracle's environment",
    "agent": "the agent phase",
    "verifier": "the verifier phase",
    "environment": "the agent's sandbox",
    "agent.timeout_sec": "honoured; unset: no agent timeout (as Harbor), unless the recipe or harness sets one",
    "agent.user": "honoured; refused where the env cannot run commands as that user (local)",
    "agent.network_mode": "honoured per phase; refused where the env cannot switch networks between phases",
    "agent.allowed_hosts": "honoured on docker (an egress proxy); refused elsewhere",
    "verifier.timeout_sec": "honoured; 600 s when unset (as Harbor)",
    "verifier.env": "honoured",
    "verifier.user": "honoured; refused where the env cannot run commands as that user (local)",
    "verifier.network_mode": "honoured per phase; refused where the env cannot switch networks between phases",
    "verifier.allowed_hosts": "honoured on docker (an egress proxy); refused elsewhere",
    "verifier.environment_mode": "honoured: `shared` grades where the agent worked, `separate` in a new sandbox",
    "verifier.environment": f"honoured: {VERIFIER_ENV}; unset with `separate`, a copy of [environment]",
    "verifier.environment.docker_image": "honoured: the verifier's image (it holds /tests); else tests/Dockerfile, "
                                         "else the task's own image with /tests uploaded",
    "verifier.environment.os": "honoured: anything but linux is refused",
    "verifier.environment.healthcheck": "not run, as in Harbor (healthchecks are for the agent's environment)",
    "verifier.environment.mcp_servers": "unused, as in Harbor: no agent works in the verifier's sandbox",
    "verifier.environment.skills_dir": "unused, as in Harbor: no agent works in the verifier's sandbox",
    "verifier.environment.allow_internet": "honoured (deprecated spelling of network_mode)",
    "verifier.collect": "honoured: run after the agent phase, before artifacts are collected; main's hooks first, "
                        "then (main stopped, for a separate verifier) the sidecars'; a failed or timed-out hook is "
                        "logged (collect.log) and grading goes on",
    "verifier.collect[].service": "honoured: main on every env; a sidecar on docker (compose), refused elsewhere",
    "verifier.collect[].user": "honoured; refused where the env cannot run commands as that user (local)",
    "environment.network_mode": "honoured: the baseline of both phases",
    "environment.allowed_hosts": "honoured on docker (an egress proxy); refused elsewhere",
    "environment.build_timeout_sec": "honoured for the sandbox's lifetime and host setup; docker builds use the "
                                     "env's `build_timeout_s` (1800 s)",
    "environment.docker_image": "honoured (a recipe's `image` wins); on docker, when it can be neither found nor "
                                "pulled, environment/Dockerfile is built and tagged with its name",
    "environment.os": "honoured: anything but linux is refused",
    "environment.cpus": "honoured (a recipe's `resources` win)",
    "environment.memory_mb": "honoured (a recipe's `resources` win)",
    "environment.storage_mb": "honoured where the env can cap a disk; else one warning (more disk, never less)",
    "environment.gpus": "honoured; refused where the env has no GPUs",
    "environment.gpu_types": "read, not used: the GPU type is the env's setting (modal's `gpu`); docker takes any "
                             "GPU the engine has, as Harbor's docker does",
    "environment.tpu": "refused on every env: none here attaches TPUs",
    "environment.mcp_servers": "handed to a harness that takes them; refused for one that cannot",
    "environment.skills_dir": "handed to a harness that takes it; refused for one that cannot",
    "environment.env": "honoured",
    "environment.healthcheck": "honoured: Docker HEALTHCHECK semantics before the agent starts",
    "environment.workdir": "honoured (a recipe's `workdir` wins)",
    "environment.allow_internet": "honoured (deprecated spelling of network_mode)",
    "steps": "honoured: each step's agent run and grade in the one sandbox, stopping below min_reward",
    "steps[].name": "honoured: steps/NAME/ holds its instruction, tests and solution",
    "steps[].agent": "honoured, over the task's [agent]",
    "steps[].verifier": "honoured, over the task's [verifier]",
    "steps[].verifier.environment_mode": "`shared` honoured; `separate` refused (not supported yet)",
    "steps[].verifier.environment": "refused (a step's separate verifier is not supported yet)",
    "steps[].verifier.collect": "honoured: run after the task's hooks in the step's collection pass, before its grade",
    "steps[].min_reward": "honoured",
    "steps[].healthcheck": "honoured, before the step's agent starts",
    "steps[].artifacts": "honoured: collected with the task's before the step's grade, into steps/NAME/artifacts/",
    "artifacts": "honoured: collected into the trial's artifacts/ and given to a separate verifier",
    "artifacts[].destination": "read; the trial's copy keeps the source path (the verifier never sees destination, "
                               "as in Harbor)",
    "artifacts[].exclude": "honoured: matching entries of a collected directory are dropped (tar --exclude patterns)",
    "artifacts[].service": "honoured: main on every env; a sidecar on docker (compose), refused elsewhere",
}


def handling(path: str) -> str | None:
    """The note for one field's dotted path: its own, else its closest table's. A separate verifier's
    [verifier.environment] fields share [environment]'s notes where they have none of their own."""
    path = re.sub(r"\[\d+\]", "[]", path)  # steps[0].agent as steps[].agent

    def closest(candidate: str, min_parts: int) -> str | None:
        parts = candidate.split(".")
        keys = (".".join(parts[:end]) for end in range(len(parts), min_parts - 1, -1))
        return next((NOTES[k] for key in keys for k in (key, key.removesuffix("[]")) if k in NOTES), None)

    if path.startswith("verifier.environment."):
        note = closest(path, 3)
        if note is None and (shared := closest(path.removeprefix("verifier."), 2)) is not None:
            return f"{shared} (in the verifier's sandbox)"
    return closest(path, 1)


def is_free_form(path: str) -> bool:
    """Keys under [task] and [metadata] cannot change a verdict."""
    return path.split(".")[0].split("[")[0] in FREE_FORM
