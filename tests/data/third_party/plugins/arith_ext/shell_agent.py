"""A harness: its "agent" is one shell command from its settings, run in the task's sandbox."""

from __future__ import annotations

from typing import Any

from agentcompass.api import AgentOutcome, ModelConfig, Sandbox, Strict, Task, TaskFormat, TrialContext


class ShellHarness:
    needs_model = False  # it calls no model: runs with the `none` model

    class Settings(Strict):  # the harness's own keys in its YAML: a typo fails before the run
        command: str

    def __init__(self, command: str, **_: Any) -> None:
        self.command = command

    def run(self, task: Task, sandbox: Sandbox, model: ModelConfig, trial: TrialContext,
            task_format: TaskFormat) -> AgentOutcome:
        result = sandbox.exec(self.command, timeout=task.agent_timeout_s)
        trial.write("agent.log", result.stdout + result.stderr)
        if result.timed_out:
            return AgentOutcome(exit_status="timeout")
        return AgentOutcome(message=f"exit code {result.exit_code}")
