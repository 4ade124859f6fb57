"""Spend caps at the model gateway: per attempt and per run, in tokens and dollars (run.max_trial_tokens,
run.max_trial_cost_usd, run.max_tokens, run.max_cost_usd).

A call is forwarded only while its trial and the run are under every cap; the first call refused at a cap
stops the trial's agent (its meter's `capped` event, which the harness waits on) and gives the attempt its
reason. The cap is checked before each call, so calls already in flight finish and are counted: a run
overshoots a cap by at most what its calls in flight spend, and under a cap an attempt has at most
MAX_IN_FLIGHT calls in flight (more get a 429, which clients retry).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentcompass.core.schema import RunConfig

MAX_IN_FLIGHT = 16  # calls of one attempt at once under a cap (Claude Code's parallel subagents stay well under)


@dataclass(frozen=True)
class SpendCaps:
    run_cost_usd: float | None = None
    run_tokens: int | None = None
    trial_cost_usd: float | None = None
    trial_tokens: int | None = None

    @classmethod
    def of(cls, run: "RunConfig") -> "SpendCaps":
        return cls(run.max_cost_usd, run.max_tokens, run.max_trial_cost_usd, run.max_trial_tokens)

    @property
    def any(self) -> bool:
        return any(v is not None for v in (self.run_cost_usd, self.run_tokens, self.trial_cost_usd, self.trial_tokens))

    @property
    def in_dollars(self) -> bool:
        return self.run_cost_usd is not None or self.trial_cost_usd is not None


def reached(spent_usd: float, spent_tokens: int, cost_cap: float | None, token_cap: int | None,
            cost_name: str, token_name: str, whose: str) -> str | None:
    """The reason a cap is reached, or None."""
    if cost_cap is not None and spent_usd >= cost_cap:
        return f"spend cap reached: {whose} model calls cost ${spent_usd:.4f}, {cost_name} is ${cost_cap:g}"
    if token_cap is not None and spent_tokens >= token_cap:
        return f"spend cap reached: {whose} model calls used {spent_tokens:,} tokens, {token_name} is {token_cap:,}"
    return None


class RunSpend:
    """What the run's calls through the gateway have spent so far, across its trials."""

    def __init__(self, caps: SpendCaps) -> None:
        self.caps = caps
        self.cost_usd = 0.0
        self.tokens = 0
        self._lock = threading.Lock()

    def add(self, cost_usd: float, tokens: int) -> None:
        with self._lock:
            self.cost_usd += cost_usd
            self.tokens += tokens

    def over(self) -> str | None:
        with self._lock:
            return reached(self.cost_usd, self.tokens, self.caps.run_cost_usd, self.caps.run_tokens,
                           "run.max_cost_usd", "run.max_tokens", "the run's")

    def trial_over(self, cost_usd: float, tokens: int) -> str | None:
        return reached(cost_usd, tokens, self.caps.trial_cost_usd, self.caps.trial_tokens,
                       "run.max_trial_cost_usd", "run.max_trial_tokens", "this attempt's")
