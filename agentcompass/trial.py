"""One attempt of one task: open → stage → agent → verify → close, each phase timed."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from agentcompass.errors import InfraError, TrialError
from agentcompass.results import TrialResult, now_iso, write_atomic
from agentcompass.task import AgentOutcome, Task

if TYPE_CHECKING:
    from agentcompass.formats.base import TaskFormat
    from agentcompass.harnesses.base import Harness
    from agentcompass.sandbox import Provider, Sandbox
    from agentcompass.schema import ModelConfig


@dataclass
class TrialContext:
    """What a harness or format may use of the trial it runs in."""

    task_id: str
    attempt: int
    dir: Path
    run_name: str
    labels: dict[str, str] = field(default_factory=dict)

    def write(self, name: str, text: str) -> Path:
        path = self.dir / name
        write_atomic(path, text)
        return path

    def append(self, name: str, text: str) -> None:
        with open(self.dir / name, "a", encoding="utf-8") as handle:
            handle.write(text)


class OpenSandboxes:
    """Every sandbox open in this process, so an interrupt can close them all."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: set[Any] = set()
        self._closing = False

    def add(self, sandbox: "Sandbox") -> None:
        """Track a new sandbox; one opened after an interrupt is closed at once."""
        with self._lock:
            if not self._closing:
                self._open.add(sandbox)
                return
        sandbox.close()
        raise InfraError("interrupted")

    def discard(self, sandbox: "Sandbox") -> None:
        with self._lock:
            self._open.discard(sandbox)

    def close_all(self) -> int:
        with self._lock:
            self._closing = True
            sandboxes = list(self._open)
            self._open.clear()
        for sandbox in sandboxes:
            try:
                sandbox.close()
            except Exception:  # closing is best effort: one failure must not keep others open
                pass
        return len(sandboxes)


@dataclass
class TrialRunner:
    """Everything a trial needs that is the same for every trial of a run."""

    task_format: "TaskFormat"
    harness: "Harness"
    provider: "Provider"
    model: "ModelConfig"
    run_name: str
    labels: dict[str, str]
    sandboxes: OpenSandboxes
    keep_environment: bool = False

    def run(self, task: Task, attempt: int, trial_dir: Path) -> TrialResult:
        """Run one attempt; TrialError escapes for the scheduler to retry or record."""
        trial = TrialContext(task.id, attempt, trial_dir, self.run_name, self.labels)
        timings: dict[str, float] = {}
        started = now_iso()
        t0 = time.monotonic()

        @contextmanager
        def phase(name: str) -> Iterator[None]:
            start = time.monotonic()
            try:
                yield
            finally:
                timings[name] = round(time.monotonic() - start, 4)

        labels = {"agentcompass": "1", "run": self.run_name, "trial": f"{task.id}.{attempt}"}
        spec = task.sandbox_spec(sandbox_name(self.run_name, task.id, attempt), labels, trial_dir)
        with phase("open"):
            sandbox = TimedSandbox(self.provider.open(spec))
        self.sandboxes.add(sandbox)
        outcome = AgentOutcome()
        try:
            with phase("stage"):
                self.task_format.stage(task, sandbox, trial)
            try:
                with phase("agent"):
                    outcome = self.harness.run(task, sandbox, self.model, trial, self.task_format)
            except TrialError as exc:
                if exc.category == "infra":
                    raise
                if not getattr(self.task_format, "grades_after_agent_error", False):
                    return self._result(task, attempt, started, t0, timings, outcome, exc)
                # The format grades a crashed agent's work too (Terminal-Bench does, officially).
                outcome = AgentOutcome(exit_status=f"{exc.category}_error", message=str(exc),
                                       usage=exc.usage if exc.usage is not None else outcome.usage)
            # Verification runs whatever the agent's exit status, a timeout included.
            with phase("verify"):
                grade = self.task_format.grade(task, sandbox, trial, outcome)
        except TrialError as exc:
            if exc.category == "infra":
                raise
            return self._result(task, attempt, started, t0, timings, outcome, exc)
        finally:
            with phase("close"):
                self.sandboxes.discard(sandbox)
                if self.keep_environment:
                    print(f"kept sandbox for {task.id} attempt {attempt}: {describe_kept(sandbox)}")
                else:
                    sandbox.close()
        timings["commands"] = round(sandbox.command_s, 4)
        result = self._result(task, attempt, started, t0, timings, outcome, None)
        result.status = "passed" if grade.passed else "failed"
        result.reward, result.rewards = grade.reward, grade.rewards
        result.message = grade.message
        result.details = grade.details
        return result

    def _result(
        self, task: Task, attempt: int, started: str, t0: float, timings: dict[str, float],
        outcome: AgentOutcome, error: TrialError | None,
    ) -> TrialResult:
        timings["total"] = round(time.monotonic() - t0, 4)
        return TrialResult(
            task_id=task.id,
            attempt=attempt,
            status="error" if error else "failed",
            error_category=error.category if error else None,
            message=str(error) if error else "",
            agent_exit_status=outcome.exit_status,
            timings=timings,
            usage=(error.usage if error is not None and error.usage is not None else outcome.usage),
            started_at=started,
            finished_at=now_iso(),
        )


class TimedSandbox:
    """Passes everything through to the sandbox, adding up the time its commands take,
    so orchestration overhead (trial time minus command time) can be measured."""

    def __init__(self, inner: "Sandbox") -> None:
        self.inner = inner
        self.command_s = 0.0

    def exec(self, cmd: str, **kwargs: Any) -> Any:
        result = self.inner.exec(cmd, **kwargs)
        self.command_s += result.duration_s
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def sandbox_name(run_name: str, task_id: str, attempt: int) -> str:
    """A name unique per trial and safe for container names: [a-zA-Z0-9_.-]."""
    raw = f"ac-{run_name}-{task_id}-{attempt}"
    return "".join(c if c.isalnum() or c in "_.-" else "-" for c in raw)[:120]


def describe_kept(sandbox: "Sandbox") -> str:
    hint = getattr(sandbox, "attach_hint", None)
    return hint() if callable(hint) else repr(sandbox)
