"""The harness contract."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from agentcompass.task import AgentOutcome, Task

if TYPE_CHECKING:
    from agentcompass.formats.base import TaskFormat
    from agentcompass.sandbox import Sandbox
    from agentcompass.schema import ModelConfig
    from agentcompass.trial import TrialContext


class Harness(Protocol):
    needs_model: bool
    # Optional: submits_only = True (no agent works in the sandbox: with fresh grading it is the grading
    # sandbox itself), attempts(task) -> bool (False leaves a task unattempted), check_tasks(tasks)
    # (raise UserError before the run when the harness cannot serve the selection), uses_gateway = True (its
    # agent makes its own model calls: the runner starts the model gateway and sets trial.gateway; the harness
    # asks trial.gateway.endpoint(trial, sandbox) for the agent's URLs and token, see agentcompass.gateway).

    def __init__(self, **settings: Any) -> None: ...

    def run(
        self, task: Task, sandbox: "Sandbox", model: "ModelConfig", trial: "TrialContext", task_format: "TaskFormat"
    ) -> AgentOutcome: ...
