"""Each trial's cost: hosted models keep their per-token cost; self-hosted endpoints are split by
concurrency from an hourly rate or a bill. A cost that cannot be known is None, never 0."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Hashable

from agentcompass.report.load import Setup, Trial
from agentcompass.report.split import MICRO, Bucket, Split, split_bill, split_hourly


@dataclass
class TrialCost:
    cost_usd: Decimal | None
    sole_usd: Decimal | None  # self-hosted: as if the trial had the endpoint alone
    basis: str  # per-token | hourly split | bill split | no model calls | unknown: <why>


@dataclass
class Costs:
    trials: dict[Hashable, TrialCost]
    bill_split: Split | None  # when a bill was used
    hourly_splits: dict[str, Split]  # endpoint -> split, when rates were used


def endpoint_of(setup: Setup) -> str:
    return f"{setup.model.get('name')}@{setup.model.get('base_url') or ''}"


def hosted_cost(trial: Trial) -> TrialCost:
    usage = trial.result.usage
    if usage.model_calls == 0 and usage.cost_usd == 0:
        return TrialCost(Decimal(0), None, "no model calls")
    if not usage.cost_known:
        return TrialCost(None, None, "unknown: no price for the model")
    return TrialCost(Decimal(str(usage.cost_usd)).quantize(MICRO), None, "per-token")


def assign(setups: list[Setup], hourly_usd: float | None = None, bill: list[Bucket] | None = None) -> Costs:
    costs: dict[Hashable, TrialCost] = {}
    # Self-hosted trials whose generation time is known, grouped by what prices them.
    groups: dict[str, dict[Hashable, list[tuple[float, float]]]] = {}
    rates: dict[str, float] = {}
    for setup in setups:
        rate = hourly_usd if hourly_usd is not None else setup.hourly_usd
        for trial in [*setup.trials, *setup.abandoned]:  # a try cut short paid for its calls too
            if not setup.self_hosted:
                costs[trial.key] = hosted_cost(trial)
                continue
            intervals = trial.intervals()
            if intervals is None:
                costs[trial.key] = TrialCost(None, None, "unknown: model time without model_calls.jsonl")
            elif bill is None and rate is None:
                costs[trial.key] = TrialCost(None, None, "unknown: self-hosted, no --hourly-usd, pricing.hourly_usd or --bill")
            else:
                group = "bill" if bill is not None else f"{endpoint_of(setup)} at ${rate}/h"
                rates[group] = rate or 0.0
                groups.setdefault(group, {})[trial.key] = intervals
    bill_split = None
    hourly_splits: dict[str, Split] = {}
    for group, intervals in groups.items():
        if group == "bill":
            split = bill_split = split_bill(intervals, bill or [])
            basis = "bill split"
        else:
            split = hourly_splits[group] = split_hourly(intervals, rates[group])
            basis = "hourly split"
        for trial_key in intervals:
            costs[trial_key] = TrialCost(split.shares[trial_key], split.sole[trial_key], basis)
    return Costs(costs, bill_split, hourly_splits)
