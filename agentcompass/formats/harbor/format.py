"""Harbor task format (Terminal-Bench 2, Harbor's registry).

A dataset is a directory of task dirs, each with task.toml, instruction.md,
environment/ (a Dockerfile, or [environment].docker_image), tests/test.sh and
solution/solve.sh. The verifier writes /logs/verifier/reward.txt or reward.json. It runs where the
agent worked ([verifier] environment_mode = "shared", the default) or, "separate", in a new
sandbox of its own image that gets only /logs/artifacts and the task's declared artifacts.

HarborFormat ties the phases together: task dirs are read by task.py, the sandbox is prepared around the agent
by phases.py, collected from by collect.py and graded by rewards.py (in a sandbox of verifier.py's choosing).
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from agentcompass.core.errors import TrialError, UserError, VerifierError
from agentcompass.core.schema import Recipe
from agentcompass.core.task import AgentOutcome, Grade, Task, Usage
from agentcompass.formats.base import SelectionParams, run_solution, select_tasks
from agentcompass.formats.git_history import scrub_future_history
from agentcompass.formats.harbor.collect import ARTIFACTS_DIR, collect_all
from agentcompass.formats.harbor.dataset import manifest_task_dirs
from agentcompass.formats.harbor.phases import as_user, await_healthy, enter_phase, open_logs, seed_workdir
from agentcompass.formats.harbor.rewards import combine_steps, reaches, run_tests
from agentcompass.formats.harbor.schema import TaskConfig
from agentcompass.formats.harbor.task import (load_task, read_config, read_config_if_present, strings, task_dirs,
                                              warn_unknown)
from agentcompass.formats.harbor.verifier import verifier_settings
from agentcompass.formats.sources import dataset_root

if TYPE_CHECKING:
    from agentcompass.core.sandbox import Sandbox, SandboxSpec
    from agentcompass.core.context import TrialContext


class HarborParams(SelectionParams):
    # "task": each task's own [verifier] environment_mode (Harbor's default); "separate": every task that allows
    # it is graded in a fresh sandbox that gets only /logs/artifacts and the declared artifacts (docs/security.md).
    verifier_mode: Literal["task", "separate"] = "task"
    # true: the workdir's git history beyond HEAD is removed before the agent starts (formats/git_history.py), for
    # datasets whose images ship the upstream repository's future (DeepSWE); Harbor itself leaves it.
    scrub_git_history: bool = False


class HarborFormat:
    Params = HarborParams
    error_table = "harbor"  # after an error, Harbor's own columns decide (core/errors.py): retried, graded, counted

    def __init__(self, recipe: Recipe) -> None:
        self.recipe = recipe

    # -- loading -------------------------------------------------------------------------
    def dataset_dir(self) -> Path:
        return dataset_root(self.recipe)

    def load(self) -> list[Task]:
        root = self.dataset_dir()
        manifest = self.recipe.source.get("manifest")  # Harbor's dataset.toml: its [[tasks]], in its order
        single = None if manifest else read_config_if_present(root)  # the root itself is one task
        if manifest:
            configs = {d: read_config(d) for d in manifest_task_dirs(str(root), str(manifest))}
        elif single is not None:
            configs = {str(root): single}
        else:
            configs = {d: c for d in task_dirs(root) if (c := read_config_if_present(d)) is not None}
        if not configs:
            raise UserError(f"benchmark '{self.recipe.name}': no Harbor tasks (dirs with task.toml) in {root}")
        warn_unknown(self.recipe.name, configs)
        return select_tasks([self.load_or_refuse(d, c) for d, c in configs.items()], self.recipe.params, self.recipe.name)

    def load_or_refuse(self, task_dir: str, config: TaskConfig) -> Task:
        """The task, or, where it asks for what agentcompass cannot do, a task refused alone: its trials
        record the reason and the dataset's other tasks run (the runner refuses a run of refused tasks only)."""
        try:
            return load_task(self.recipe, task_dir, config)
        except UserError as exc:
            return Task(id=os.path.basename(task_dir), instruction="", refusal=str(exc))

    # -- trial phases --------------------------------------------------------------------
    def stage(self, task: Task, sandbox: "Sandbox", trial: "TrialContext") -> None:
        """Where no image was built, do what the Dockerfile does (seed the workdir, run setup); then wait
        for the healthcheck and put the sandbox on the agent's network."""
        seed_workdir(task, sandbox, trial)
        if self.recipe.params.get("scrub_git_history"):
            scrub_future_history(sandbox)
        open_logs(task, sandbox)
        await_healthy(task.data["healthcheck"], sandbox, trial)
        enter_phase(task, sandbox, "agent")

    def run_agent(self, harness: Any, task: Task, sandbox: "Sandbox", model: Any, trial: "TrialContext") -> AgentOutcome:
        """Each [[steps]] entry in order in the one sandbox, each graded at once; stop below its min_reward."""
        if not task.data["steps"]:
            return harness.run(task, as_user(sandbox, task.agent_user), model, trial, self)
        outcome, grades, invalid = AgentOutcome(), [], None
        for number, step in enumerate(task.data["steps"]):
            step_task = self.step_task(task, step)
            if number:  # the step before's verifier kept /logs/verifier to itself while it ran (rewards.py)
                open_logs(task, sandbox)
            await_healthy(step["healthcheck"], sandbox, trial)
            enter_phase(task, sandbox, "agent")
            failed: TrialError | None = None
            try:
                done = harness.run(step_task, as_user(sandbox, step_task.agent_user), model, trial, self)
            except TrialError as exc:  # as Harbor's multi-step trial: the step is graded when the table says so
                if exc.category != "agent" or not exc.graded:
                    exc.usage = outcome.usage + (exc.usage or Usage())
                    raise
                failed, invalid = exc, invalid or (None if exc.reward_counts else exc)
                done = AgentOutcome(exit_status="agent_error", message=str(exc), usage=exc.usage or Usage())
            outcome = done.model_copy(update={"usage": outcome.usage + done.usage})
            grade = self.grade(step_task, sandbox, trial, done)
            grades.append({"name": step["name"], "reward": grade.reward, "rewards": grade.rewards,
                           **({"error_class": failed.error_class(), "message": str(failed)[:300]} if failed else {})})
            if not reaches(grade.rewards, step["min_reward"]):
                break
        if invalid is not None:  # a step graded without a valid reward (BadRequestError): the trial has none either
            invalid.usage = outcome.usage
            raise invalid
        return outcome.model_copy(update={"steps": grades})

    def step_task(self, task: Task, step: dict[str, Any]) -> Task:
        """The task as one step sees it: the step's instruction, user, timeouts, tests over the task's, solution."""
        return replace(
            task, instruction=step["instruction"], agent_user=step["agent_user"],
            agent_timeout_s=self.recipe.timeouts.agent or step["agent_timeout_s"] or task.agent_timeout_s,
            verify_timeout_s=self.recipe.timeouts.verify or step["verify_timeout_s"] or task.verify_timeout_s,
            data={**task.data, "steps": [], "step": step["name"], "verifier_user": step["verifier_user"],
                  "artifacts": step["artifacts"], "collect": step["collect"],
                  "verifier_env": step["verifier_env"], "tests": [*task.data["tests"], str(Path(step["dir"]) / "tests")],
                  "solution": str(Path(step["dir"]) / "solution")},
        )

    def solve(self, task: Task, sandbox: "Sandbox", trial: "TrialContext") -> AgentOutcome:
        solution = Path(task.data["solution"])
        if not os.path.isfile(os.path.join(task.data["solution"], "solve.sh")):
            raise VerifierError(f"task '{task.id}' has no {solution.relative_to(task.data['dir'])}/solve.sh for the oracle")
        sandbox.upload(solution, "/solution")
        return run_solution(task, sandbox, trial, "bash /solution/solve.sh", task.data["solution_env"])

    # -- a separate verifier environment ([verifier] environment_mode = "separate") --------
    def grading_spec(self, task: Task, spec: "SandboxSpec") -> "SandboxSpec | None":
        """Harbor's separate verifier: [verifier.environment]'s image, else one built from tests/, with
        [verifier.environment]'s resources (the task's [environment] when absent); None when shared."""
        if task.data["environment_mode"] != "separate":
            return None
        verifier = task.data["verifier"]
        env = verifier_settings(verifier)
        network = task.data["networks"].get("verifier") or env.baseline_network()
        user = task.data["verifier_user"]
        context = verifier["build_context"]
        return replace(
            spec, name=f"{spec.name[:114]}-grade", labels={**spec.labels, "phase": "grade"},
            image=verifier["image"], build_context=Path(context) if context else None,
            workdir=self.recipe.workdir or env.workdir or spec.workdir,
            env={**self.recipe.env, **strings(env.env)},
            cpus=self.recipe.resources.cpus or env.cpus, memory_mb=self.recipe.resources.memory_mb or env.memory_mb,
            storage_mb=env.storage_mb, gpus=env.gpus or 0, allow_internet=network == "public",
            network_modes=(network,) if task.data["networks"] else (), users={"[verifier] user": user} if user else {},
            compose=None,  # the verifier runs alone, as in Harbor: the sidecars ended with the agent's sandbox
        )

    def collect(self, task: Task, sandbox: "Sandbox", trial: "TrialContext", outcome: AgentOutcome) -> AgentOutcome:
        """Once the agent is done: the [[verifier.collect]] hooks, then what the verifier gets from the agent's
        sandbox (and its sidecars): /logs/artifacts and the task's artifacts, each under the trial's artifacts/
        at its own path (collect.py)."""
        collected = collect_all(task, sandbox, trial)
        return outcome.model_copy(update={"collected": collected}) if collected else outcome

    def stage_grading(self, task: Task, sandbox: "Sandbox", trial: "TrialContext") -> None:
        """The artifacts, over the task's starting state: a verifier image is the task's or built FROM it, so
        where no image is built (a task run on the host) the workdir is seeded as the agent's was."""
        seed_workdir(task, sandbox, trial)
        open_logs(task, sandbox)
        for path in (ARTIFACTS_DIR, *(a["source"] for a in task.data["artifacts"])):
            local = trial.dir / "artifacts" / path.lstrip("/")
            if local.exists():
                sandbox.upload(local, path)

    def grade(self, task: Task, sandbox: "Sandbox", trial: "TrialContext", outcome: AgentOutcome) -> Grade:
        mode = task.data["environment_mode"]
        if mode == "shared" and not task.data["steps"]:  # (a multi-step task's steps collected as each was graded)
            outcome = self.collect(task, sandbox, trial, outcome)  # what the agent left, before the verifier touches it
        if task.data["steps"]:
            return combine_steps(outcome.steps, task.data["multi_step_reward_strategy"], len(task.data["steps"]))
        enter_phase(task, sandbox, "verifier")
        return run_tests(task, sandbox, trial, outcome)
