"""Whether a run's trials may be spread over worker processes (agentcompass.core.shards), and over how many.

Forking is only safe where the provider's state is plain data and nothing that counts for the whole
run (the gateway's tokens, the provider limit and creation rate, kept sandboxes) lives in one process.
The scheduler asks once it has its lanes; a run asks before it writes anything (run.processes > 1 that
cannot be honoured is the user's to change)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from agentcompass.core.errors import UserError

if TYPE_CHECKING:
    from agentcompass.core.lanes import Lane

TRIALS_PER_PROCESS = 128  # below this many concurrent trials per process, one process keeps up


def processes_for(lanes: list["Lane"], concurrency: int, setting: int | None) -> int:
    """How many processes run these lanes: `setting` when given (run.processes), else one per core
    once there are at least TRIALS_PER_PROCESS concurrent trials per process; one where forking is unsafe."""
    if why_not(lanes):
        return 1
    if setting is not None:
        return max(1, min(setting, concurrency))
    return max(1, min(len(os.sched_getaffinity(0)), concurrency // TRIALS_PER_PROCESS))


def why_not(lanes: list["Lane"]) -> str | None:
    """Why these lanes must stay in one process, if they must."""
    if not hasattr(os, "fork"):
        return "this platform cannot fork"
    for lane in lanes:
        runner = lane.runner
        reason = stays_in_one_process(runner.provider, runner.gateway is not None,
                                      runner.pacer.limit is not None or runner.pacer.qps is not None,
                                      runner.keep_environment)
        if reason:
            return reason
    return None


def stays_in_one_process(provider: Any, uses_gateway: bool, paced: bool, keep_environment: bool) -> str | None:
    if not getattr(provider, "fork_safe", False):
        return f"the {provider.name} provider keeps connections or threads a fork would break"
    if uses_gateway:
        return "the model gateway's per-trial tokens live in one process"
    if paced:
        return "the provider limit and creation rate (run.provider_limit, run.env_open_qps) are counted in one process"
    if keep_environment:
        return "kept sandboxes are reported by the process that ran them"
    return None


def check_processes(resolved: Any, provider: Any, harness_cls: type) -> None:
    """run.processes > 1 where the run must stay in one process: one line before anything is written."""
    setting = resolved.run.processes
    if setting is None or setting <= 1:
        return
    paced = any((resolved.run.provider_limit, resolved.run.env_open_qps,
                 getattr(provider, "default_provider_limit", None), getattr(provider, "default_open_qps", None)))
    reason = stays_in_one_process(provider, getattr(harness_cls, "uses_gateway", False), paced,
                                  resolved.run.keep_environment)
    if reason:
        raise UserError(f"run.processes={setting} cannot be honoured here ({reason}); "
                        "leave run.processes unset (one process) or use --env local")
