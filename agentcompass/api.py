"""The public contract for extensions: everything a third-party provider, task format or harness imports,
at one path that stays put when the package's insides move (`from agentcompass.api import Sandbox, Task`).

Named `api` for what it is, the way mini-swe-agent's `minisweagent` and inspect_ai's `inspect_ai.util` hold
the protocols their environments and agents are written against: one module for all three kinds, so an
extension never names a module of the execution core. Removing or renaming a name here is a breaking change
(tests/test_api.py pins the list; docs/extending.md has the deprecation policy). Names are imported on first
use (PEP 562, core/faces.py), so `import agentcompass.api` costs nothing until a name is used."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentcompass.core.faces import lazy_attributes

if TYPE_CHECKING:
    from agentcompass.core.context import TrialContext
    from agentcompass.core.contracts import Harness, TaskFormat
    from agentcompass.core.errors import (AgentAuthenticationError, AgentError, AgentSafetyRefusalError,
                                          AgentTimeoutError, ApiInternalServerError, ApiRateLimitError, BackPressure,
                                          BadRequestError, BuildFailed, ContextWindowExceededError, FatalInfraError,
                                          InfraError, ModelNotFoundError, NonZeroAgentExitCodeError,
                                          OutputLengthExceededError, RewardFileEmptyError, RewardFileNotFoundError,
                                          SandboxLost, TaskRefused, TrialError, UserError, VerifierError,
                                          VerifierOutputParseError, VerifierTimeoutError)
    from agentcompass.core.sandbox import ExecResult, Provider, Sandbox, SandboxSpec
    from agentcompass.core.schema import ModelConfig, Recipe, Strict
    from agentcompass.core.task import AgentOutcome, Grade, Task, Usage
    from agentcompass.formats.base import SelectionParams, select_tasks, source_path

_SANDBOX = "agentcompass.core.sandbox"
_ERRORS = "agentcompass.core.errors"
_TASK = "agentcompass.core.task"
_SCHEMA = "agentcompass.core.schema"
_FORMATS = "agentcompass.formats.base"

PUBLIC = {
    # a provider: opens sandboxes for a spec, and the sandbox it opens
    "Provider": _SANDBOX, "Sandbox": _SANDBOX, "SandboxSpec": _SANDBOX, "ExecResult": _SANDBOX,
    # a task format and a harness (Protocols: implement their methods, no base class to inherit)
    "TaskFormat": "agentcompass.core.contracts", "Harness": "agentcompass.core.contracts",
    # a format's Params base (sample_ids, filter, limit, shuffle, seed, path) and the selection it drives
    "SelectionParams": _FORMATS, "select_tasks": _FORMATS, "source_path": _FORMATS,
    # what flows through a trial
    "Task": _TASK, "Grade": _TASK, "AgentOutcome": _TASK, "Usage": _TASK,
    "TrialContext": "agentcompass.core.context",
    # settings: Strict is the base of every Settings/Params class (a typo in a key fails before the run)
    "Strict": _SCHEMA, "Recipe": _SCHEMA, "ModelConfig": _SCHEMA,
    # what an extension raises: UserError before the run (one line, exit 2); during a trial, InfraError
    # (retried), AgentError, VerifierError, or one of the InfraError kinds
    "UserError": _ERRORS, "TrialError": _ERRORS, "InfraError": _ERRORS, "AgentError": _ERRORS,
    "VerifierError": _ERRORS, "SandboxLost": _ERRORS, "BackPressure": _ERRORS, "BuildFailed": _ERRORS,
    "TaskRefused": _ERRORS, "FatalInfraError": _ERRORS,
    # Harbor's error classes (docs/scoring.md): a harness that raises the one for what it saw gets Harbor's
    # retry, grading and counting for it
    "AgentTimeoutError": _ERRORS,
    "NonZeroAgentExitCodeError": _ERRORS,
    "ContextWindowExceededError": _ERRORS,
    "OutputLengthExceededError": _ERRORS,
    "AgentSafetyRefusalError": _ERRORS,
    "BadRequestError": _ERRORS,
    "AgentAuthenticationError": _ERRORS,
    "ModelNotFoundError": _ERRORS,
    "ApiRateLimitError": _ERRORS,
    "ApiInternalServerError": _ERRORS,
    "VerifierTimeoutError": _ERRORS,
    "RewardFileNotFoundError": _ERRORS,
    "RewardFileEmptyError": _ERRORS,
    "VerifierOutputParseError": _ERRORS,
}
__all__ = sorted(PUBLIC)

__getattr__ = lazy_attributes(__name__, PUBLIC)


def __dir__() -> list[str]:
    return __all__
