"""What every task format shares: its selection params, task selection, limits and instruction rendering.
The contract itself (`TaskFormat`) is in agentcompass.core.contracts, re-exported here for formats."""

from __future__ import annotations

import difflib
import random
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import Field

from agentcompass.core.contracts import TaskFormat
from agentcompass.core.errors import UserError
from agentcompass.core.schema import Recipe, Strict
from agentcompass.core.task import AgentOutcome, Task

if TYPE_CHECKING:
    from agentcompass.core.sandbox import Sandbox
    from agentcompass.core.context import TrialContext


class SelectionParams(Strict):
    """The benchmark params every format takes (a format's `Params`): a typo in a key fails before the run."""

    path_keys: ClassVar[tuple[str, ...]] = ("path",)  # relative to where they were written (checks.anchor_path)
    sample_ids: list[str] | str | None = None
    filter: str | None = None  # regex on the task id
    limit: int | None = Field(None, ge=1)  # zero tasks is never what was meant
    shuffle: bool = False
    seed: int = 0
    path: str | None = None  # a local copy of the dataset instead of the recipe's source


def select_tasks(tasks: list[Task], params: dict[str, Any], benchmark: str = "BENCHMARK") -> list[Task]:
    """Apply the recipe's selection params: sample_ids, filter (regex), shuffle with seed, limit."""
    selected = tasks
    ids = params.get("sample_ids")
    if ids:
        if isinstance(ids, str):
            ids = [ids]
        by_id = {t.id: t for t in tasks}
        missing = [i for i in ids if i not in by_id]
        if missing:
            raise UserError(f"unknown sample_ids: {'; '.join(unknown_id(i, list(by_id)) for i in missing)}; "
                            f"the benchmark has {len(tasks)} tasks: `agentcompass list tasks {benchmark}` lists them")
        selected = [by_id[i] for i in ids]
    pattern = params.get("filter")
    if pattern:
        try:
            regex = re.compile(pattern)
        except re.error as exc:
            raise UserError(f"benchmark param 'filter' is not a valid regex: {exc}") from exc
        selected = [t for t in selected if regex.search(t.id)]
    if params.get("shuffle"):
        selected = list(selected)
        random.Random(params.get("seed", 0)).shuffle(selected)
    limit = params.get("limit")
    if limit is not None:
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise UserError(f"benchmark param 'limit' must be a whole number >= 1, got {limit!r}; "
                            f"leave it out (null) for every task")
        selected = selected[:limit]
    return selected


def unknown_id(wanted: str, ids: list[str]) -> str:
    """'ID' with the closest ids there are, for the unknown-sample_ids line."""
    close = difflib.get_close_matches(wanted, ids, n=3, cutoff=0.6)
    if not close:  # a prefix or fragment of real ids ("django-11", "task2068")
        close = [i for i in ids if wanted.lower() in i.lower()][:3]
    return f"'{wanted}' (closest: {', '.join(close)})" if close else f"'{wanted}'"


def source_path(recipe: Recipe, key: str = "path") -> Path:
    """The recipe's `source.path`: absolute, or relative to the recipe file."""
    raw = recipe.params.get(key) or recipe.source.get(key)
    if not raw:
        raise UserError(f"benchmark '{recipe.name}' needs source.{key} (a directory or file)")
    path = Path(str(raw)).expanduser()
    if not path.is_absolute() and recipe.base_dir:
        path = Path(recipe.base_dir) / path
    if not path.exists():
        raise UserError(f"benchmark '{recipe.name}': source {key} '{path}' does not exist")
    return path


def recipe_limits(recipe: Recipe, agent_timeout_s: float, verify_timeout_s: float) -> dict[str, Any]:
    """The Task fields a recipe sets alike for all its tasks (env, resources, internet, timeouts), for a
    format whose tasks carry none of their own; the timeouts default to the format's."""
    return {
        "env": dict(recipe.env),
        "cpus": recipe.resources.cpus,
        "memory_mb": recipe.resources.memory_mb,
        "allow_internet": True if recipe.allow_internet is None else recipe.allow_internet,
        "agent_timeout_s": recipe.timeouts.agent or agent_timeout_s,
        "verify_timeout_s": recipe.timeouts.verify or verify_timeout_s,
        "build_timeout_s": recipe.timeouts.build,
    }


def render_instruction(recipe: Recipe, **fields: Any) -> str:
    """The recipe's instruction template, or the task's own text."""
    if not recipe.instruction_template:
        return str(fields.get("instruction") or fields.get("problem_statement") or "")
    try:
        return recipe.instruction_template.format(**fields)
    except (KeyError, IndexError, ValueError) as exc:
        raise UserError(f"benchmark '{recipe.name}': instruction_template uses an unknown field {exc}; available: {', '.join(sorted(fields))}") from exc


def run_solution(task: Task, sandbox: "Sandbox", trial: "TrialContext", command: str,
                 env: dict[str, str] | None = None) -> AgentOutcome:
    """Run an uploaded reference solution as the oracle; its output, if any, becomes agent.log."""
    result = sandbox.exec(command, env=env, timeout=task.agent_timeout_s)
    trial.log("agent.log", result.stdout + result.stderr)
    if result.timed_out:
        return AgentOutcome(exit_status="timeout")
    return AgentOutcome(exit_status="completed" if result.exit_code == 0 else f"exit {result.exit_code}")


__all__ = ["SelectionParams", "TaskFormat", "recipe_limits", "render_instruction", "run_solution", "select_tasks",
           "source_path", "unknown_id"]
