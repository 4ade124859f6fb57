"""The contracts the core runs implementations by: a task format (`TaskFormat`) and a harness (`Harness`).
Implementations live in agentcompass.formats and agentcompass.harnesses and are found by the registry;
the core knows them only through these Protocols."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from agentcompass.core.errors import UserError
from agentcompass.core.schema import Recipe, Strict
from agentcompass.core.task import AgentOutcome, Grade, Task

if TYPE_CHECKING:
    from agentcompass.core.context import TrialContext
    from agentcompass.core.sandbox import Sandbox
    from agentcompass.core.schema import ModelConfig


class TaskFormat(Protocol):
    Params: type[Strict]  # the benchmark params it accepts

    def __init__(self, recipe: Recipe) -> None: ...

    def load(self) -> list[Task]: ...

    def stage(self, task: Task, sandbox: "Sandbox", trial: "TrialContext") -> None:
        """Put the task's starting state into a freshly opened sandbox."""

    def solve(self, task: Task, sandbox: "Sandbox", trial: "TrialContext") -> AgentOutcome:
        """Apply the reference solution (what the oracle harness does)."""

    def grade(self, task: Task, sandbox: "Sandbox", trial: "TrialContext", outcome: AgentOutcome) -> Grade: ...

    # Optional, for grading in a new sandbox (SWE-bench's evaluation_mode fresh, Harbor's separate verifier):
    # grading_spec(task, spec) -> SandboxSpec | None   the grading sandbox, None to grade where the agent worked
    # collect(task, sandbox, trial, outcome) -> AgentOutcome   in the agent's sandbox before it closes
    # stage_grading(task, sandbox, trial) -> None       put the starting state and the submission's inputs in place


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
