"""A harness whose agent does the work and then crashes, as on a context overflow or a model error."""

from __future__ import annotations

from typing import Any

from agentcompass.core.errors import AgentError


class CrashAfterSolving:
    needs_model = False

    def __init__(self, **_: Any) -> None:
        pass

    def run(self, task: Any, sandbox: Any, model: Any, trial: Any, task_format: Any) -> Any:
        task_format.solve(task, sandbox, trial)
        raise AgentError("context length exceeded")
