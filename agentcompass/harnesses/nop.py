"""nop: does nothing. A benchmark whose nop score is not 0 has tests that pass for free."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentcompass.core.schema import Strict
from agentcompass.core.task import AgentOutcome, Task

if TYPE_CHECKING:
    from agentcompass.core.contracts import TaskFormat
    from agentcompass.core.sandbox import Sandbox
    from agentcompass.core.schema import ModelConfig
    from agentcompass.core.context import TrialContext


class NopHarness:
    needs_model = False

    class Settings(Strict):
        """nop takes no settings: any key under harness is a typo, refused before the run."""

    def __init__(self, **_: Any) -> None:
        pass

    def submission(self, task: Task, task_format: "TaskFormat") -> str:
        return ""  # nothing, without a sandbox (validate on GCP Batch)

    def run(
        self, task: Task, sandbox: "Sandbox", model: "ModelConfig", trial: "TrialContext", task_format: "TaskFormat"
    ) -> AgentOutcome:
        trial.write("agent.log", "nop: did nothing\n")
        return AgentOutcome(exit_status="completed")
