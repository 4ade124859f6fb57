"""`--verifier-from TASKS_DIR`: changed task folders whose verifier replaces the original's, task by task.

Only the verifier is taken from the changed folder (Harbor: tests/ and [verifier]; Terminal-Bench: tests/ and
run-tests.sh): the sandbox is still the original task's image, the one the kept state was taken against, so a
regrade never grades the agent's work on another starting point.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from agentcompass.core.errors import UserError
from agentcompass.core.limits import scaled
from agentcompass.core.registry import resolve
from agentcompass.core.schema import Recipe, RunConfig
from agentcompass.core.task import Task

# The task data each format's verifier reads (besides the task's verify_timeout_s).
VERIFIER_KEYS: dict[str, tuple[str, ...]] = {
    "harbor": ("tests", "verifier", "verifier_env", "verifier_user"),
    "terminal_bench": ("dir",),
}
SELECTION = ("sample_ids", "limit", "filter", "shuffle", "seed")  # the original run's selection decides the tasks


def with_verifier_from(recipe: Recipe, run: RunConfig, tasks: list[Task], folder: Path) -> list[Task]:
    """`tasks` with the verifier of each task `folder` holds (the others unchanged); UserError for a folder that
    changes nothing this run graded, or a format whose verifier is not a task folder's."""
    keys = VERIFIER_KEYS.get(recipe.format)
    if keys is None:
        raise UserError(f"--verifier-from replaces Harbor or Terminal-Bench task folders' tests; the '{recipe.format}' "
                        f"format's verifier comes from its dataset: regrade without --verifier-from")
    if not folder.is_dir():
        raise UserError(f"--verifier-from {folder}: no such folder; pass a folder holding the changed task folders")
    params = {k: v for k, v in recipe.params.items() if k not in SELECTION}
    if "path" in params:  # a dataset folder given at run time (--benchmark-params '{"path": ...}') wins over source
        params["path"] = str(folder.resolve())
    changed_recipe = recipe.model_copy(update={"source": {"path": str(folder.resolve())}, "params": params})
    try:
        changed = {task.id: scaled(task, run) for task in resolve("format", recipe.format)(changed_recipe).load()}
    except UserError as exc:
        raise UserError(f"--verifier-from {folder}: {exc}") from exc
    ours = {task.id for task in tasks}
    strangers = sorted(set(changed) - ours)
    if strangers:
        raise UserError(f"--verifier-from {folder} holds task '{strangers[0]}', which this run did not attempt; pass a "
                        f"folder with only changed folders of the run's tasks")
    if not changed:
        raise UserError(f"--verifier-from {folder} holds no task folder; pass a folder holding changed task folders")
    out = []
    for task in tasks:
        new = changed.get(task.id)
        if new is None:
            out.append(task)
            continue
        data = {**task.data, **{key: new.data[key] for key in keys if key in new.data}}
        out.append(dataclasses.replace(task, data=data, verify_timeout_s=new.verify_timeout_s))
    return out
