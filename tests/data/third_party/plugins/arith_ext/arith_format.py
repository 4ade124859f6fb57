"""A task format: arithmetic questions from a JSON list, graded by comparing answer.txt with the answer."""

from __future__ import annotations

import json
import shlex

from agentcompass.api import (AgentOutcome, Grade, Recipe, Sandbox, SelectionParams, Task, TrialContext,
                              VerifierError, select_tasks, source_path)


class ArithFormat:
    Params = SelectionParams  # sample_ids, filter, limit, shuffle, seed, path

    def __init__(self, recipe: Recipe) -> None:
        self.recipe = recipe

    def load(self) -> list[Task]:
        problems = json.loads(source_path(self.recipe).read_text())
        tasks = [Task(id=p["id"], instruction=f"Write the value of {p['question']} to answer.txt.",
                      runs_on_host=True, agent_timeout_s=30, verify_timeout_s=30, data=p) for p in problems]
        return select_tasks(tasks, self.recipe.params, self.recipe.name)

    def stage(self, task: Task, sandbox: Sandbox, trial: TrialContext) -> None:
        sandbox.exec(f"printf '%s\\n' {shlex.quote(task.data['question'])} > question.txt")

    def solve(self, task: Task, sandbox: Sandbox, trial: TrialContext) -> AgentOutcome:
        sandbox.exec(f"printf '%s\\n' {shlex.quote(task.data['answer'])} > answer.txt")
        return AgentOutcome()

    def grade(self, task: Task, sandbox: Sandbox, trial: TrialContext, outcome: AgentOutcome) -> Grade:
        result = sandbox.exec("cat answer.txt", timeout=task.verify_timeout_s)
        if result.timed_out:
            raise VerifierError("reading answer.txt timed out")
        answer = result.stdout.strip() if result.ok else None
        passed = answer == task.data["answer"]
        return Grade(passed=passed, reward=float(passed),
                     message=f"answered {answer!r}, expected {task.data['answer']!r}")
