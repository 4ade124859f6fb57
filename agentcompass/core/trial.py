"""One attempt of one task: open → stage → agent → verify → close, each phase timed."""

from __future__ import annotations

import hashlib
import random
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from agentcompass.core import leftovers
from agentcompass.core.kept_state import keep_outcome, keep_sandbox_state, kept_summary
from agentcompass.core.errors import (AgentSpoiledSandboxError, BackPressure, InfraError, TaskRefused, TrialError, decide,
                                       follows)
from agentcompass.core.pacing import Pacer
from agentcompass.core.context import TrialContext
from agentcompass.core.results import TrialResult, now_iso
from agentcompass.core.task import AgentOutcome, Task, Usage

if TYPE_CHECKING:
    from agentcompass.core.context import ModelGateway
    from agentcompass.core.contracts import Harness, TaskFormat
    from agentcompass.core.sandbox import Provider, Sandbox, SandboxSpec
    from agentcompass.core.schema import ModelConfig
    from agentcompass.core.task import Grade

log = structlog.get_logger("agentcompass")
MAX_SANDBOX_NAME = 120  # docker allows more, but names stay readable in `docker ps`
SAFE_NAME = re.compile(r"[A-Za-z0-9_.-]*")
# Back-pressure (a quota or rate limit met opening the first sandbox): waits with backoff, not tries.
PRESSURE_FIRST_S, PRESSURE_MAX_S, MAX_PRESSURE_WAITS = 5.0, 120.0, 12


class PressureBeforeOpen(Exception):
    """BackPressure met opening a trial's first sandbox: nothing of the trial exists yet, so it simply waits."""

    def __init__(self, pressure: BackPressure) -> None:
        super().__init__(str(pressure))
        self.pressure = pressure


class OpenSandboxes:
    """Every sandbox open in this process, so an interrupt can close them all."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: set[Any] = set()
        self.closing = threading.Event()  # set once an interrupt closes everything

    def add(self, sandbox: "Sandbox") -> None:
        """Track a new sandbox; one opened after an interrupt is closed at once."""
        with self._lock:
            if not self.closing.is_set():
                self._open.add(sandbox)
                return
        sandbox.close()
        raise InfraError("interrupted")

    def discard(self, sandbox: "Sandbox") -> None:
        with self._lock:
            self._open.discard(sandbox)

    def close_all(self) -> int:
        with self._lock:
            self.closing.set()
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
    pacer: Pacer = field(default_factory=Pacer)  # the env's open-slot limit and creation rate
    gateway: "ModelGateway | None" = None  # started by the runner when the harness uses one
    kept_state_cap_mb: float = 200.0  # a shared sandbox's final state kept for regrading up to this size (0: none)

    def run(self, task: Task, attempt: int, trial_dir: Path) -> TrialResult:
        """Run one attempt once the pacer gives it a turn; the wait is its `wait` timing, not its time.
        TrialError escapes for the scheduler to retry or record."""
        waited_total = 0.0
        for pressure in range(1, MAX_PRESSURE_WAITS + 1):
            try:
                with self.pacer.turn(abort=self.sandboxes.closing.is_set) as waited:
                    waited_total += waited
                    result = self._run(task, attempt, trial_dir)
                break
            except PressureBeforeOpen as exc:  # a quota or rate limit: not this trial's failure, nor one of its tries
                if pressure == MAX_PRESSURE_WAITS:
                    raise InfraError(f"{exc} (still after {MAX_PRESSURE_WAITS} waits)") from exc.pressure
                self.pacer.lower(str(exc))
                delay = min(PRESSURE_MAX_S, PRESSURE_FIRST_S * 2 ** (pressure - 1))
                started = time.monotonic()
                self.sandboxes.closing.wait(delay / 2 + random.uniform(0, delay / 2))
                waited_total += time.monotonic() - started
                if self.sandboxes.closing.is_set():
                    raise InfraError("interrupted") from exc
        if waited_total:
            result.timings["wait"] = round(waited_total, 4)
        return result

    def _run(self, task: Task, attempt: int, trial_dir: Path) -> TrialResult:
        if task.refusal:
            raise TaskRefused(f"refused: {task.refusal}")
        trial = TrialContext(task.id, attempt, trial_dir, self.run_name, self.labels, self.sandboxes.closing, self.gateway)
        extras: list[TimedSandbox] = []
        trial.open_sandbox = lambda extra_spec: self._open_extra(extra_spec, extras)
        timings: dict[str, float] = {}
        started = now_iso()
        t0 = time.monotonic()

        def phase(name: str) -> Phase:
            return Phase(timings, name)

        labels = {"agentcompass": "1", "run": self.run_name, "trial": f"{task.id}.{attempt}"}
        time_limit = getattr(self.harness, "time_limit_s", None)  # a harness's own limit may outlast the task's
        spec = task.sandbox_spec(sandbox_name(self.run_name, task.id, attempt), labels, trial_dir,
                                 time_limit(task) if callable(time_limit) else None)
        grading_spec = self._grading_spec(task, spec)
        if grading_spec is not None and getattr(self.harness, "submits_only", False):
            spec, grading_spec = grading_spec, None  # no agent works in it: the one sandbox is the fresh one
        with phase("open"):
            try:
                sandbox = TimedSandbox(self.provider.open(spec))
            except BackPressure as exc:
                raise PressureBeforeOpen(exc) from exc
        self.sandboxes.add(sandbox)
        outcome: AgentOutcome | None = None  # made only when the agent fails before giving one
        graded = False
        agent_error: TrialError | None = None  # an agent error after which the attempt is still graded
        # Whether a failure now could be what the agent left in its sandbox (set once the agent's turn begins,
        # cleared once a fresh grading sandbox, which the agent never touched, takes over).
        spoilable = {"agent_sandbox": False}
        try:
            with phase("stage"):
                self.task_format.stage(task, sandbox, trial)
            spoilable["agent_sandbox"] = True
            try:
                with phase("agent"):
                    # A format may drive the agent itself (Harbor: users, multi-step tasks graded step by step).
                    run_agent = getattr(self.task_format, "run_agent", None)
                    if run_agent is not None:
                        outcome = run_agent(self.harness, task, sandbox, self.model, trial)
                    else:
                        outcome = self.harness.run(task, sandbox, self.model, trial, self.task_format)
            except TrialError as exc:
                # The table (core/errors.py) says whether the attempt is still graded after the agent's error.
                if exc.category != "agent" or not decide(exc, follows(self.task_format)).graded:
                    raise
                agent_error = exc
                outcome = AgentOutcome(exit_status=f"{exc.category}_error", message=str(exc),
                                       usage=exc.usage if exc.usage is not None else Usage())
            kept: dict[str, Any] = {}
            if grading_spec is None:  # the verifier runs where the agent worked: keep that state for a regrade
                with phase("keep"):
                    kept = self._keep(sandbox, trial, outcome)
            # Verification runs whatever the agent's exit status, a timeout included.
            with phase("verify"):
                if grading_spec is None:
                    grade = self.task_format.grade(task, sandbox, trial, outcome)
                    details = sandbox_details(sandbox)  # before close: the sandbox's own account (docker: OOM kills)
                else:
                    details = sandbox_details(sandbox)  # the agent's sandbox, before fresh grading closes it
                    grade = self._grade_fresh(task, sandbox, trial, outcome, grading_spec, spoilable)
            graded = True
        except TrialError as exc:
            stopping = trial.stopping.is_set() or self.sandboxes.closing.is_set()
            error = (leftovers.spoiled(exc, sandbox, trial.task_id, attempt)
                     if spoilable["agent_sandbox"] and not stopping else None) or exc
            if error.category == "infra" and not trial.tampered:
                raise error
            graded = True  # an agent or verifier error is a verdict too; what a tampering agent caused is its failure
            if error.usage is None and outcome is not None:
                error.usage = outcome.usage
            # A spoiled sandbox cannot run the details' command either: asking would only wait out its time-out.
            details = {} if isinstance(error, AgentSpoiledSandboxError) else sandbox_details(sandbox)
            return self._result(task, attempt, started, t0, timings, outcome, error, details, trial=trial,
                                agent_error=agent_error)
        finally:
            with phase("close"):
                try:
                    self._close_extras(extras, graded, task.id, attempt)
                finally:
                    self.sandboxes.discard(sandbox)
                    if self.keep_environment:
                        print(f"kept sandbox for {task.id} attempt {attempt}: {describe_kept(sandbox)}")
                    else:
                        close_after(sandbox, graded, task.id, attempt)
        timings["commands"] = round(sandbox.command_s + sum(extra.command_s for extra in extras), 4)
        return self._result(task, attempt, started, t0, timings, outcome, None, {**grade.details, **details, **kept}, grade,
                            trial, agent_error=agent_error)

    def _keep(self, sandbox: "TimedSandbox", trial: TrialContext, outcome: AgentOutcome) -> dict[str, Any]:
        """What a regrade needs of a shared sandbox (core/kept_state.py): the outcome and the final filesystem,
        taken before the verifier writes anything; a harness that only submits left no state of an agent's. An env
        that cannot list its sandbox's changes (modal, gcp) keeps nothing: no file written per trial for nothing."""
        if getattr(self.harness, "submits_only", False):
            keep_outcome(trial, outcome)
            return {}
        if self.kept_state_cap_mb <= 0 or not callable(getattr(sandbox.inner, "export_changes", None)):
            return {}
        keep_outcome(trial, outcome)
        return {"kept_state": kept_summary(keep_sandbox_state(sandbox.inner, trial, self.kept_state_cap_mb))}

    def _open_extra(self, spec: "SandboxSpec", extras: list["TimedSandbox"]) -> "TimedSandbox":
        """A further sandbox of the trial, tracked like its first (an interrupt closes it)."""
        extra = TimedSandbox(self.provider.open(spec))
        self.sandboxes.add(extra)
        extras.append(extra)
        return extra

    def _close_extras(self, extras: list["TimedSandbox"], graded: bool, task_id: str, attempt: int) -> None:
        for extra in extras:
            self.sandboxes.discard(extra)
            if self.keep_environment:
                print(f"kept sandbox for {task_id} attempt {attempt}: {describe_kept(extra)}")
            else:
                close_after(extra, graded, task_id, attempt)

    # -- fresh grading: the format grades the agent's submission in a new sandbox ----------
    def _grading_spec(self, task: Task, spec: "SandboxSpec") -> "SandboxSpec | None":
        """The format's sandbox for grading (evaluation mode fresh), or None to grade where the agent worked."""
        grading_spec = getattr(self.task_format, "grading_spec", None)
        return grading_spec(task, spec) if grading_spec is not None else None

    def _grade_fresh(self, task: Task, sandbox: "TimedSandbox", trial: TrialContext, outcome: AgentOutcome,
                     grading_spec: "SandboxSpec", spoilable: dict[str, bool]) -> "Grade":
        """Collect the submission (SWE-bench's patch, Harbor's artifacts), close the agent's sandbox
        (nothing else in it counts), then stage a new sandbox and grade the submission there."""
        outcome = self.task_format.collect(task, sandbox, trial, outcome)
        keep_outcome(trial, outcome)  # the submission and what was collected: all a fresh grading needs again
        spoilable["agent_sandbox"] = False  # from here on nothing runs where the agent worked
        if not self.keep_environment:
            try:
                sandbox.close()  # run's finally closes it again and reports a failure
            except Exception:
                pass
        grader = TimedSandbox(self.provider.open(grading_spec))
        self.sandboxes.add(grader)
        try:
            self.task_format.stage_grading(task, grader, trial)
            return self.task_format.grade(task, grader, trial, outcome)
        finally:
            sandbox.command_s += grader.command_s
            self.sandboxes.discard(grader)
            if self.keep_environment:
                print(f"kept grading sandbox for {task.id} attempt {trial.attempt}: {describe_kept(grader)}")
            else:
                grader.close()

    def _result(
        self, task: Task, attempt: int, started: str, t0: float, timings: dict[str, float],
        outcome: AgentOutcome | None, error: TrialError | None, details: dict[str, Any] | None = None,
        grade: "Grade | None" = None, trial: TrialContext | None = None, agent_error: TrialError | None = None,
    ) -> TrialResult:
        """The trial's record: an error's, or the grade's (made in one go: setting fields one by one costs more).
        The error class that decided it is `details.error_class`; an agent error after which the attempt was graded
        keeps the grade's status when the table says its reward counts, and is an error (no valid reward) when not."""
        timings["total"] = round(time.monotonic() - t0, 4)
        details = {**agent_network(task), **(details or {})}
        if trial is not None and trial.tampering:  # shown in the summary and report; the verdict stands as graded
            details["tampering"] = list(trial.tampering)
        outcome = outcome if outcome is not None else AgentOutcome()
        deciding = error or agent_error
        if deciding is not None:
            details["error_class"] = deciding.error_class()
        if error is None and agent_error is not None and not decide(agent_error, follows(self.task_format)).reward_counts:
            error = agent_error  # graded, but the reward is no valid one (Harbor's BadRequestError)
        if error is not None and error.reward_counts and not error.graded:
            status, message = "failed", str(error)  # the agent's failure with nothing to grade: reward 0, in the base
        elif error is not None:
            status, message = "error", str(error)
        else:
            status = "passed" if grade is not None and grade.passed else "failed"
            message = grade.message if grade is not None else ""
            if agent_error is not None:  # graded after the agent's error, the reward counts: say both
                message = f"{agent_error}; graded: {message}" if message else f"{agent_error}; graded"
        if status == "failed" and error is not None:
            error = None  # a failed attempt, not an error: no category for the rules to weigh
        if trial is not None and trial.tampered:  # never solved, never left out of the count: failed, with evidence
            details["tampered"] = list(trial.tampered)
            status, error = "failed", None
            message = "tampered: " + "; ".join(trial.tampered)
        spent = deciding.usage if deciding is not None and deciding.usage is not None else outcome.usage
        return TrialResult(
            task_id=task.id,
            attempt=attempt,
            status=status,
            error_category=error.category if error else None,
            message=message,
            reward=grade.reward if grade is not None else None,
            rewards=grade.rewards if grade is not None else {},
            agent_exit_status=outcome.exit_status,
            timings=timings,
            usage=spent,
            started_at=started,
            finished_at=now_iso(),
            details=details,
        )


class Phase:
    """Times a block into timings[name]; a class, as a generator-based context manager costs
    several times more, and a trial times five phases."""

    __slots__ = ("timings", "name", "start")

    def __init__(self, timings: dict[str, float], name: str) -> None:
        self.timings, self.name = timings, name

    def __enter__(self) -> None:
        self.start = time.monotonic()

    def __exit__(self, *exc: object) -> None:
        self.timings[self.name] = round(time.monotonic() - self.start, 4)


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

    # The contract's other calls, spelled out: each trial makes several, and __getattr__ runs only
    # after a failed lookup has raised (and caught) an AttributeError.
    def upload(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner.upload(*args, **kwargs)

    def download(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner.download(*args, **kwargs)

    def close(self) -> Any:
        return self.inner.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def close_after(sandbox: "Sandbox", graded: bool, task_id: str, attempt: int) -> None:
    """Close the sandbox. Once the trial is graded, a failed close is logged and the grade stands:
    what the agent did is already judged, and a leftover sandbox is for `cleanup`, not a retry."""
    try:
        sandbox.close()
    except Exception as exc:
        if not graded:
            raise
        log.warning("closing the sandbox failed; the grade stands", task=task_id, attempt=attempt, error=str(exc))


def agent_network(task: Task) -> dict[str, Any]:
    """The network the agent's phase had, so a reader of the record (analyze's network detector) can tell a
    forbidden download from an allowed one: a format's per-phase mode (Harbor's [agent] network_mode) over
    the task's allow_internet. allow_internet is True only for the public internet (an allowlist is not)."""
    mode = (task.data.get("networks") or {}).get("agent") or ("public" if task.allow_internet else "no-network")
    return {"allow_internet": mode == "public", "agent_network": mode}


def sandbox_details(sandbox: "Sandbox") -> dict[str, Any]:
    """What a provider records about its sandbox in the trial's details (docker: OOM kills); never raises."""
    details = getattr(sandbox, "details", None)
    try:
        return dict(details()) if callable(details) else {}
    except Exception:  # a detail is not worth a trial
        return {}


def sandbox_name(run_name: str, task_id: str, attempt: int) -> str:
    """A name unique per trial and safe for container names: [a-zA-Z0-9_.-], at most 120 characters.
    A name that had to be cut or changed ends in a hash of the whole, so two trials never share one."""
    raw = f"ac-{run_name}-{task_id}-{attempt}"
    if len(raw) <= MAX_SANDBOX_NAME and SAFE_NAME.fullmatch(raw):  # the usual case, without a loop per character
        return raw
    safe = "".join(c if c.isalnum() or c in "_.-" else "-" for c in raw)
    if safe == raw and len(safe) <= MAX_SANDBOX_NAME:
        return safe
    digest = hashlib.sha256(raw.encode()).hexdigest()[:12]
    return f"{safe[: MAX_SANDBOX_NAME - len(digest) - 1]}-{digest}"


def describe_kept(sandbox: "Sandbox") -> str:
    hint = getattr(sandbox, "attach_hint", None)
    return hint() if callable(hint) else repr(sandbox)
