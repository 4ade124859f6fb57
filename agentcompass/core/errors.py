"""Error kinds: what the user must fix (exit 2) and what went wrong inside a trial."""

from __future__ import annotations


class UserError(Exception):
    """Bad input: reported as one line, exit code 2, nothing written."""


class TrialError(Exception):
    """A trial could not finish normally; `category` decides whether it is retried."""

    category = "infra"
    retryable = True
    usage = None  # what the agent spent before failing (agentcompass.core.task.Usage), when the harness knows


class InfraError(TrialError):
    """The environment failed (sandbox, image, network): retried with backoff."""


class SandboxLost(InfraError):
    """The sandbox itself died mid-trial (killed, OOM-killed as a whole, removed, terminated): whatever phase
    it was in, the verdict is the infrastructure's, so the trial is retried and never graded."""


class BackPressure(InfraError):
    """The service is at a quota or a rate limit (GCP's QUOTA_EXCEEDED, rateLimitExceeded; Modal's
    ResourceExhaustedError): nothing is wrong with the trial. It waits with backoff while the env opens fewer
    sandboxes at once (pacing.Pacer.lower), and the wait is not one of its retries."""


class AgentError(TrialError):
    category = "agent"
    retryable = False


class VerifierError(TrialError):
    category = "verifier"
    retryable = False


class BuildFailed(InfraError):
    """An image could not be built: the environment's fault, not the agent's, but building it again for
    every task or attempt would fail the same way, so it is recorded once and never retried."""

    retryable = False


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


class SpendCapReached(AgentError):
    """The model gateway refused the agent's calls at a spend cap (run.max_cost_usd and friends): the agent was
    stopped and the attempt is failed with the cap in its message, counted like any agent error, never retried."""
