"""The oracle: applies the task's reference solution, the benchmark's upper bound."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentcompass.core.schema import Strict
from agentcompass.core.task import AgentOutcome, Task

if TYPE_CHECKING:
    from agentcompass.core.contracts import TaskFormat
    from agentcompass.core.sandbox import Sandbox
    from agentcompass.core.schema import ModelConfig
    from agentcompass.core.context import TrialContext


class OracleHarness:
    needs_model = False

    class Settings(Strict):
        """oracle takes no settings: any key under harness is a typo, refused before the run."""

    def __init__(self, **_: Any) -> None:
        pass

    def submission(self, task: Task, task_format: "TaskFormat") -> str | None:
        """The reference patch without a sandbox (validate on GCP Batch); None where the format has none."""
        gold_patch = getattr(task_format, "gold_patch", None)
        return gold_patch(task) if gold_patch is not None else None

    def run(
        self, task: Task, sandbox: "Sandbox", model: "ModelConfig", trial: "TrialContext", task_format: "TaskFormat"
    ) -> AgentOutcome:
        return task_format.solve(task, sandbox, trial)
