"""Error kinds: what the user must fix (exit 2), and the one table of what went wrong inside a trial.

Every error a trial can meet is a class below, named after Harbor 0.26's where Harbor has one
(harbor/models/trial/error_policy.py). Each class carries its row of the table: whether the attempt is
retried, whether it is still graded, and whether that grade's reward counts in the rates. Harbor-format
tasks follow these columns exactly; the other formats keep their official harness's behaviour
(`decide`, docs/scoring.md). Harnesses and formats raise the class that says what they saw.
"""

from __future__ import annotations

from dataclasses import dataclass


class UserError(Exception):
    """Bad input: reported as one line, exit code 2, nothing written."""


@dataclass(frozen=True)
class Policy:
    """One row's verdict columns: retried (the scheduler tries again), graded (the verifier still runs on what
    the agent left), reward_counts (that reward is the attempt's verdict; without it the attempt has no valid
    reward and the recipe's rule decides whether it is a failed attempt or left out)."""

    retried: bool
    graded: bool
    reward_counts: bool


class TrialError(Exception):
    """A trial could not finish normally; its class's row of the table decides what happens next."""

    category = "infra"  # infra | agent | verifier: what the rules of docs/scoring.md count
    retryable = True
    graded = False  # a Harbor-format task is still graded after it
    reward_counts = False  # ... and that reward is the attempt's verdict
    harbor_name: str | None = None  # Harbor 0.26's class for the same failure, where it has one
    usage = None  # what the agent spent before failing (agentcompass.core.task.Usage), when the harness knows

    @classmethod
    def error_class(cls) -> str:
        """The name recorded in the attempt (details.error_class)."""
        return cls.__name__


# -- infra: the environment or the model endpoint failed; no verdict on the agent ---------------------------
class InfraError(TrialError):
    """The environment failed (sandbox, image, engine, network): retried with backoff."""


class SandboxLost(InfraError):
    """The sandbox itself died mid-trial (killed, OOM-killed as a whole, removed, terminated): whatever phase
    it was in, the verdict is the infrastructure's, so the trial is retried and never graded."""

    harbor_name = "SandboxLikelyOutOfMemoryError"


class BackPressure(InfraError):
    """The service is at a quota or a rate limit (GCP's QUOTA_EXCEEDED, rateLimitExceeded; Modal's
    ResourceExhaustedError): nothing is wrong with the trial. It waits with backoff while the env opens fewer
    sandboxes at once (pacing.Pacer.lower), and the wait is not one of its retries."""


class BuildFailed(InfraError):
    """An image could not be built: the environment's fault, not the agent's, but building it again for
    every task or attempt would fail the same way, so it is recorded once and never retried."""

    retryable = False
    harbor_name = "SandboxBuildFailedError"


class TaskRefused(InfraError):
    """The task asks for what agentcompass or the env cannot honour (a field, a feature): no sandbox is opened,
    the reason is the trial's message, and the run's other tasks go on. Like an infra error it is no verdict
    on the agent; trying again cannot help, so it is never retried."""

    retryable = False


class FatalInfraError(TrialError):
    """What no retry and no other task can get past (credentials rejected, permission denied, an invalid
    setting, a missing app or image): the scheduler stops the run and reports this one line (exit 2)."""

    retryable = False
    fatal = True


class ApiRateLimitError(InfraError):
    """The model endpoint kept answering 429 (rate limit) after the agent's own retries."""

    harbor_name = "ApiRateLimitError"


class ApiInternalServerError(InfraError):
    """The model endpoint kept failing (5xx, overloaded, unreachable) after the agent's own retries."""

    harbor_name = "ApiInternalServerError"


# -- agent: the agent's own failure -------------------------------------------------------------------------
class AgentError(TrialError):
    """An agent failure Harbor's table does not name: as Harbor treats an unknown exception, the attempt is
    graded and its reward counts (never retried here: that would pay the model again for its own failure)."""

    category = "agent"
    retryable = False
    graded = True
    reward_counts = True


class AgentTimeoutError(AgentError):
    """The agent ran past its time limit and was stopped; what it did so far is graded."""

    harbor_name = "AgentTimeoutError"


class NonZeroAgentExitCodeError(AgentError):
    """The agent's process (an installed CLI) exited with a non-zero code; what it did is graded."""

    harbor_name = "NonZeroAgentExitCodeError"


class ContextWindowExceededError(AgentError):
    """The conversation outgrew the model's context window."""

    harbor_name = "ContextWindowExceededError"


class OutputLengthExceededError(AgentError):
    """A reply was cut at the model's output limit and the agent could not go on."""

    harbor_name = "OutputLengthExceededError"


class AgentSafetyRefusalError(AgentError):
    """The model refused the task (a content-policy or safety refusal)."""

    harbor_name = "AgentSafetyRefusalError"


class BadRequestError(AgentError):
    """The endpoint refused a request as malformed (400/422: unsupported parameters, a bad payload): graded,
    but the reward is no valid one, as Harbor decides."""

    reward_counts = False
    harbor_name = "BadRequestError"


class AgentAuthenticationError(AgentError):
    """The endpoint rejected the API key (401/403): the agent never worked, so there is nothing to grade."""

    graded = False
    reward_counts = False
    harbor_name = "AgentAuthenticationError"


class ModelNotFoundError(AgentError):
    """The endpoint does not know the model (404): nothing to grade."""

    graded = False
    reward_counts = False
    harbor_name = "ModelNotFoundError"


class AgentSpoiledSandboxError(AgentError):
    """After the agent worked in the sandbox, what it left there could have caused the failure that followed: the
    sandbox could no longer run a command (a fork bomb, a full disk, a killed shell), or the verifier left no
    valid reward while the agent's processes still ran beside it or something killed it. A failed attempt in
    the rate's base, never retried (paid again) nor left out. Not Harbor's: it leaves such attempts out."""

    graded = False
    reward_counts = True  # no grade: the attempt is failed, reward 0


class SpendCapReached(AgentError):
    """The model gateway refused the agent's calls at a spend cap (run.max_cost_usd and friends): the agent was
    stopped, the cap is in the attempt's message, and like a time limit what it did so far is graded and counts
    (never retried: that would pay the model again)."""


# -- verifier: the tests ran but gave no valid reward ---------------------------------------------------------
class VerifierError(TrialError):
    """The verifier could not give a reward (a task without tests or solution, a failed grading step)."""

    category = "verifier"
    retryable = False
    graded = True  # the verifier ran: it is what failed
    exit_code: int | None = None  # the tests' exit code, where they ended (a kill by a signal is 128 + its number)


class VerifierTimeoutError(VerifierError):
    """The tests ran past the verifier's time limit."""

    harbor_name = "VerifierTimeoutError"


class RewardFileNotFoundError(VerifierError):
    """The tests ended without writing a reward file."""

    harbor_name = "RewardFileNotFoundError"


class RewardFileEmptyError(VerifierError):
    """The tests wrote an empty reward file."""

    harbor_name = "RewardFileEmptyError"


class VerifierOutputParseError(VerifierError):
    """The reward file holds no finite number (or named numbers)."""

    harbor_name = "VerifierOutputParseError"


# -- the table ------------------------------------------------------------------------------------------------
TABLE: tuple[type[TrialError], ...] = (
    InfraError, SandboxLost, BackPressure, BuildFailed, TaskRefused, FatalInfraError, ApiRateLimitError,
    ApiInternalServerError, AgentError, AgentTimeoutError, NonZeroAgentExitCodeError, ContextWindowExceededError,
    OutputLengthExceededError, AgentSafetyRefusalError, BadRequestError, AgentAuthenticationError,
    ModelNotFoundError, AgentSpoiledSandboxError, SpendCapReached, VerifierError, VerifierTimeoutError,
    RewardFileNotFoundError, RewardFileEmptyError, VerifierOutputParseError,
)
# What a format follows (its `error_table`): Harbor's columns; Terminal-Bench 1's harness, which grades whatever
# the agent did and counts the reward; or the rest (SWE-bench, CooperBench), which grade no attempt whose agent
# failed and leave the error to the recipe's rule.
FOLLOWS = ("harbor", "grades_after_agent_error", "errors_not_graded")


def follows(task_format: object) -> str:
    """Which behaviour a format's official harness has after an error (one of FOLLOWS)."""
    declared = getattr(task_format, "error_table", None)
    if declared is not None:
        return str(declared)
    return "grades_after_agent_error" if getattr(task_format, "grades_after_agent_error", False) else "errors_not_graded"


def policy_of(error: TrialError) -> Policy:
    """The error's own row (Harbor's columns)."""
    return Policy(error.retryable, error.graded, error.reward_counts)


def decide(error: TrialError, behaviour: str) -> Policy:
    """What happens after `error` in a format that follows `behaviour`. What the agent spoiled is a failed attempt
    everywhere; otherwise Harbor-format tasks take the error's row, Terminal-Bench 1 grades every agent error and
    counts the reward, and the rest grade no failed agent (the rule counts its error)."""
    row = policy_of(error)
    if isinstance(error, AgentSpoiledSandboxError) or behaviour == "harbor":
        return row
    if behaviour == "grades_after_agent_error" and error.category == "agent":
        return Policy(retried=False, graded=True, reward_counts=True)
    return Policy(retried=row.retried, graded=False, reward_counts=False)
