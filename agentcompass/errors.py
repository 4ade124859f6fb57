"""Error kinds: what the user must fix (exit 2) and what went wrong inside a trial."""

from __future__ import annotations


class UserError(Exception):
    """Bad input: reported as one line, exit code 2, nothing written."""


class TrialError(Exception):
    """A trial could not finish normally; `category` decides whether it is retried."""

    category = "infra"
    retryable = True
    usage = None  # what the agent spent before failing (agentcompass.task.Usage), when the harness knows


class InfraError(TrialError):
    """The environment failed (sandbox, image, network): retried with backoff."""


class SandboxLost(InfraError):
    """The sandbox itself died mid-trial (killed, OOM-killed as a whole, removed, terminated): whatever phase
    it was in, the verdict is the infrastructure's, so the trial is retried and never graded."""


class AgentError(TrialError):
    category = "agent"
    retryable = False


class VerifierError(TrialError):
    category = "verifier"
    retryable = False
