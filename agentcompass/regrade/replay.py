"""One attempt graded again: a fresh sandbox of the task's image, the attempt's kept state put back, the (possibly
changed) verifier run by the format exactly as in a normal run, with every check it makes there.

What is put back is the agent's work and nothing else: the verifier's inputs are cleared and uploaded afresh by the
format's own grade step, the changes the kept state makes are checked like the agent's changes (they are them), and
no file of the original attempt's verdict (result.json, verifier logs, rewards) is ever read as one. Restoring never
writes outside the fresh sandbox: docker's archive API resolves every path inside the container, and artifacts are
copied on the host as links, never followed.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from agentcompass.core.errors import AgentError, InfraError, TaskRefused, TrialError
from agentcompass.core.context import TrialContext
from agentcompass.core.results import TrialResult, now_iso
from agentcompass.core.task import Task, Usage
from agentcompass.core.trial import Phase, TimedSandbox, TrialRunner, close_after, sandbox_details, sandbox_name
from agentcompass.regrade.source import Kept, OriginalRun


class NotRegradable(InfraError):
    """An attempt with nothing to grade again (no kept state, an env that keeps none): recorded with the reason."""

    retryable = False


class RegradeHarness:
    """Stands in for the agent: its turn is the kept state put back. Only the original run's attempts are run."""

    needs_model = False

    def __init__(self, original: OriginalRun) -> None:
        self.original = original
        self._ids = original.task_ids()

    def attempts(self, task: Task) -> bool:
        return task.id in self._ids


class ReplayRunner(TrialRunner):
    """The TrialRunner of a regrade: each attempt's agent phase is its kept state restored (see the module)."""

    def _run(self, task: Task, attempt: int, trial_dir: Path) -> TrialResult:
        if task.refusal:
            raise TaskRefused(f"refused: {task.refusal}")
        original: OriginalRun = self.harness.original
        kept = original.kept(task.id, attempt)
        if isinstance(kept, str):
            raise NotRegradable(f"cannot regrade: {kept}")
        trial = TrialContext(task.id, attempt, trial_dir, self.run_name, self.labels, self.sandboxes.closing, None)
        extras: list[TimedSandbox] = []
        trial.open_sandbox = lambda extra_spec: self._open_extra(extra_spec, extras)
        timings: dict[str, float] = {}
        started, t0 = now_iso(), time.monotonic()
        labels = {"agentcompass": "1", "run": self.run_name, "trial": f"{task.id}.{attempt}"}
        spec = task.sandbox_spec(sandbox_name(self.run_name, task.id, attempt), labels, trial_dir, None)
        grading_spec = self._grading_spec(task, spec)
        fresh = grading_spec is not None
        if not fresh and kept.archive is None:
            raise NotRegradable(f"cannot regrade: the verifier runs in the agent's sandbox and its state was not kept "
                                f"({kept.why_no_archive})")
        if task.data.get("steps"):
            raise NotRegradable("cannot regrade: a multi-step task is graded step by step as its agent works; only its "
                                "final state is kept")
        outcome = kept.outcome.model_copy(update={"usage": Usage()})
        origin = {"regraded_from": str(kept.dir)}
        with Phase(timings, "open"):
            sandbox = TimedSandbox(self.provider.open(grading_spec if fresh else spec))
        self.sandboxes.add(sandbox)
        graded = False
        try:
            with Phase(timings, "stage"):
                self._put_back(task, sandbox, trial, kept, fresh)
            with Phase(timings, "verify"):
                grade = self.task_format.grade(task, sandbox, trial, outcome)
                details = sandbox_details(sandbox)
            graded = True
        except TrialError as exc:
            if exc.category == "infra" and not trial.tampered:
                raise
            graded = True
            return self._result(task, attempt, started, t0, timings, outcome, exc, {**origin, **sandbox_details(sandbox)},
                                trial=trial, agent_error=agent_error_of(kept))
        finally:
            with Phase(timings, "close"):
                try:
                    self._close_extras(extras, graded, task.id, attempt)
                finally:
                    self.sandboxes.discard(sandbox)
                    close_after(sandbox, graded, task.id, attempt)
        timings["commands"] = round(sandbox.command_s, 4)
        return self._result(task, attempt, started, t0, timings, outcome, None, {**grade.details, **details, **origin},
                            grade, trial, agent_error=agent_error_of(kept))

    def _put_back(self, task: Task, sandbox: "TimedSandbox", trial: TrialContext, kept: Kept, fresh: bool) -> None:
        """Fresh grading: the collected artifacts into the new attempt's folder, then the format's grading stage
        (which uploads them, as after the agent). Shared: the format's stage, then the kept filesystem."""
        artifacts = kept.dir / "artifacts"
        if artifacts.is_dir():
            shutil.copytree(artifacts, trial.dir / "artifacts", symlinks=True)  # links stay links, never followed
        for name in getattr(self.task_format, "kept_files", ()):  # what else the format's grade reads of the attempt
            source = kept.dir / name
            if source.is_file() and not source.is_symlink():
                shutil.copyfile(source, trial.dir / name)
        if fresh:
            self.task_format.stage_grading(task, sandbox, trial)
            return
        self.task_format.stage(task, sandbox, trial)
        restore = getattr(sandbox.inner, "restore_changes", None)
        if not callable(restore):
            raise NotRegradable(f"cannot regrade: this env cannot put a kept filesystem state back into a sandbox "
                                f"({type(sandbox.inner).__name__}); regrade on docker")
        assert kept.archive is not None
        restore(kept.archive)


def agent_error_of(kept: Kept) -> AgentError | None:
    """The agent's error the original attempt was graded after (its class by name, its message), so that the same
    table decides the regraded verdict (a BadRequestError's reward never counts, a timeout's does)."""
    name = kept.recorded.details.get("error_class")
    if kept.outcome.exit_status != "agent_error" or not isinstance(name, str):
        return None
    classes, found = [AgentError], None
    while classes and found is None:
        current = classes.pop()
        found = current if current.__name__ == name else None
        classes += current.__subclasses__()
    return found(kept.outcome.message) if found is not None else None
