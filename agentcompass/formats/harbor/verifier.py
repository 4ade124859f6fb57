"""Where a Harbor task's verifier runs, by Harbor 0.26's rules (harbor/models/task/verifier_mode.py).

"shared" grades where the agent worked. "separate" grades in a new sandbox defined by, in this order:
[verifier.environment] docker_image (its image holds /tests); tests/Dockerfile (built from tests/, which
it bakes in); else the task's own environment (its docker_image or environment/Dockerfile) with /tests
uploaded. Its settings are [verifier.environment]'s, or, without that table, a fresh copy of [environment].
"""

from __future__ import annotations

import os
from typing import Any

from agentcompass.core.errors import UserError
from agentcompass.formats.harbor.schema import Environment, TaskConfig


def environment_mode(task_dir: str, config: TaskConfig, forced: str | None = None) -> str:
    """[verifier] environment_mode; "separate" implied by a [verifier.environment] table. The benchmark param
    verifier_mode = "separate" (`forced`) grades every task that allows it as Harbor's separate mode does:
    a single-step task (multi-step ones are graded shared, as separate steps are not supported yet)."""
    verifier = config.verifier
    mode = verifier.environment_mode or ("separate" if verifier.environment is not None else "shared")
    if mode == "shared" and verifier.environment is not None:
        raise UserError(f"{task_dir}/task.toml: [verifier.environment] needs environment_mode = \"separate\"")
    if forced == "separate" and not config.steps:
        return "separate"
    return mode


def separate_verifier(task_dir: str, config: TaskConfig, task_image: str | None) -> dict[str, Any]:
    """The separate verifier's sandbox: its environment settings, image or build context, and whether its
    image holds /tests already ("bundled") or they are uploaded as in shared mode."""
    own = config.verifier.environment
    settings = own if own is not None else config.environment.model_copy(deep=True)
    tests = f"{task_dir}/tests"
    if own is not None and own.docker_image:
        image, context, bundled = own.docker_image, None, True
    elif os.path.isfile(f"{tests}/Dockerfile"):
        image, context, bundled = None, tests, True
    elif os.path.isfile(f"{tests}/docker-compose.yaml"):
        raise UserError(f"{task_dir}/tests/docker-compose.yaml: a separate verifier of compose services is not "
                        f"supported yet; give tests/ a Dockerfile or leave the task out")
    else:  # the task's own environment, as Harbor falls back to it
        dockerfile = os.path.isfile(f"{task_dir}/environment/Dockerfile")
        image, context, bundled = task_image, None if task_image or not dockerfile else f"{task_dir}/environment", False
    if settings.os != "linux":
        raise UserError(f"task '{os.path.basename(task_dir)}' needs [verifier.environment] os = \"{settings.os}\", "
                        f"which no provider here can honour (they run Linux sandboxes); leave the task out")
    if settings.tpu is not None:
        raise UserError(f"task '{os.path.basename(task_dir)}' asks for [verifier.environment.tpu], which no provider "
                        f"here can attach; leave the task out")
    return {"settings": settings.model_dump(), "image": image, "build_context": context, "bundled_tests": bundled}


def verifier_settings(data: dict[str, Any]) -> Environment:
    return Environment.model_validate(data["settings"])
