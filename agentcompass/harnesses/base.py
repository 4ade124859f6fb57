"""The harness contract."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from agentcompass.core.errors import UserError
from agentcompass.core.task import AgentOutcome, Task

if TYPE_CHECKING:
    from agentcompass.formats.base import TaskFormat
    from agentcompass.core.sandbox import Sandbox
    from agentcompass.core.schema import ModelConfig
    from agentcompass.core.trial import TrialContext


class Harness(Protocol):
    needs_model: bool
    # Optional: submits_only = True (no agent works in the sandbox: with fresh grading it is the grading
    # sandbox itself), attempts(task) -> bool (False leaves a task unattempted), check_tasks(tasks)
    # (raise UserError before the run when the harness cannot serve the selection), task_tools: the
    # Task.agent_tools fields it hands its agent (e.g. {"mcp_servers", "skills_dir"}; see check_agent_tools),
    # uses_gateway = True (its agent makes its own model calls: the runner starts the model gateway and sets
    # trial.gateway; the harness asks trial.gateway.endpoint(trial, sandbox) for the agent's URLs and token,
    # see agentcompass.gateway.server).

    def __init__(self, **settings: Any) -> None: ...

    def run(
        self, task: Task, sandbox: "Sandbox", model: "ModelConfig", trial: "TrialContext", task_format: "TaskFormat"
    ) -> AgentOutcome: ...


def check_agent_tools(harness: Any, name: str, tasks: list[Task]) -> None:
    """Before the run: a task offering its agent tools (Harbor's mcp_servers, skills_dir) needs a harness that
    hands them over; one that drives no model (oracle, nop) has no agent to give them to and runs it."""
    if not getattr(harness, "needs_model", False):
        return
    usable = getattr(harness, "task_tools", frozenset())
    for task in tasks:
        missing = [tool for tool in task.agent_tools if tool not in usable]
        if missing:
            raise UserError(f"task '{task.id}' gives its agent [environment] {missing[0]}, which the {name} harness cannot "
                            f"hand to its agent (it uses {', '.join(sorted(usable)) or 'none of them'}); choose a harness "
                            "that does, or leave the task out (--benchmark-params '{\"sample_ids\": [...]}')")
