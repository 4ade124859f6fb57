"""Each trial's cost, every try of it included. Hosted models: tokens x the model's prices (the
harness's own figure kept beside). Self-hosted endpoints, one bill group per endpoint (base URL +
model): split by concurrency from an hourly rate, or from a bill limited to the jobs' window. A cost
that cannot be known is None, never 0: no price, no rate, no call records, or generation the bill
does not cover."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Hashable

from agentcompass.core.errors import UserError
from agentcompass.report.bill import seconds
from agentcompass.report.coverage import Covered, cover, window
from agentcompass.report.load import Setup, Trial, Try, Unrecorded
from agentcompass.report.prices import TokenPrices, Tokens, of_calls, prices_of
from agentcompass.report.split import MICRO, Bucket, Interval, Split, split_bill, split_hourly

NO_PRICE = "unknown: self-hosted, no --hourly-usd, pricing.hourly_usd or --bill for its endpoint"


@dataclass
class TrialCost:
    cost_usd: Decimal | None  # every try of the attempt
    sole_usd: Decimal | None  # self-hosted: as if the trial had the endpoint alone
    basis: str  # per-token (preset|litellm) | reported by the harness | hourly split | bill split | no model calls | unknown: <why>
    retry_usd: Decimal | None = Decimal(0)  # the part of cost_usd spent in failed tries (try-<n>/)
    reported_usd: Decimal | None = None  # hosted: what the harness or CLI wrote in trials.jsonl


@dataclass
class EndpointPricing:
    """What prices one self-hosted endpoint: an hourly rate, or a bill."""

    hourly_usd: float | None = None
    source: str | None = None  # the bill: a file path, or "modal"
    bill: list[Bucket] | None = None
    rows: list[dict[str, object]] | None = None  # what Modal returned, kept for the record


@dataclass
class Group:
    """One bill group: the setups of one endpoint, how it was priced and how the cost was split."""

    endpoint: str
    setups: list[str]
    pricing: EndpointPricing | None
    split: Split | None = None
    covered: list[Covered] | None = None  # with a bill: each interval's part inside the jobs' window
    window: tuple[float, float, float] | None = None  # the jobs' first start, last finish, union seconds


@dataclass
class Costs:
    trials: dict[Hashable, TrialCost]
    unrecorded: dict[str, TrialCost]  # per setup: its interrupted attempts' cost (counted with the retries)
    groups: list[Group] = field(default_factory=list)


def usd(value: float) -> Decimal:
    return Decimal(str(value)).quantize(MICRO)


def hosted_cost(trial: Trial, prices: TokenPrices | None) -> TrialCost:
    usage = trial.result.usage
    reported = usd(usage.cost_usd) if usage.cost_known else None
    tried = [c for t in trial.tries for c in t.calls]
    if usage.model_calls == 0 and usage.cost_usd == 0 and not tried:
        return TrialCost(Decimal(0), None, "no model calls")
    calls = trial.all_calls()
    tokens = of_calls(calls) if calls is not None else None
    if tokens is None:  # no call records (or a reply's counts unknown): the trial's totals, at base rates
        tokens = [Tokens(usage.tokens_in, usage.tokens_out, usage.tokens_cached, per_request=False)]
    if prices is None:
        if reported is None:
            return TrialCost(None, None, "unknown: no price for the model", None)
        return TrialCost(reported, None, "reported by the harness", None if tried else Decimal(0), reported)
    retry_tokens = of_calls(tried)
    retry = None if retry_tokens is None else prices.cost(retry_tokens).quantize(MICRO)
    return TrialCost(prices.cost(tokens).quantize(MICRO), None, f"per-token ({prices.source})", retry, reported)


def hosted_unrecorded(unrecorded: list[Unrecorded], prices: TokenPrices | None) -> TrialCost:
    calls = [c for u in unrecorded for t in u.tries for c in t.calls]
    if not calls:
        return TrialCost(Decimal(0), None, "none")
    tokens = of_calls(calls)
    if prices is not None and tokens is not None:
        cost = prices.cost(tokens).quantize(MICRO)
        return TrialCost(cost, None, f"per-token ({prices.source})", cost)
    answered = [c.get("cost_usd") for c in calls if c.get("status") == "ok"]
    if None in answered:
        return TrialCost(None, None, "unknown: no price for the model", None)
    cost = sum((usd(c) for c in answered), Decimal(0))
    return TrialCost(cost, None, "reported by the harness", cost)


def assign(setups: list[Setup], pricing: dict[str, EndpointPricing] | None = None) -> Costs:
    """`pricing`: each self-hosted endpoint's rate or bill, by endpoint; others use their preset's rate."""
    costs = Costs({}, {})
    for setup in setups:
        if not setup.self_hosted:
            prices = prices_of(setup.model)
            costs.trials.update((t.key, hosted_cost(t, prices)) for t in setup.trials)
            costs.unrecorded[setup.name] = hosted_unrecorded(setup.unrecorded, prices)
    by_endpoint: dict[str, list[Setup]] = {}
    for setup in setups:
        if setup.self_hosted:
            by_endpoint.setdefault(setup.endpoint, []).append(setup)
    for endpoint, members in by_endpoint.items():
        given = (pricing or {}).get(endpoint) or preset_pricing(members)
        costs.groups.append(price_group(Group(endpoint, [s.name for s in members], given), members, costs))
    return costs


def preset_pricing(members: list[Setup]) -> EndpointPricing | None:
    """The presets' hourly rate for an endpoint: one endpoint has one rate, so presets must agree."""
    rates = sorted({s.hourly_usd for s in members if s.hourly_usd is not None})
    if len(rates) > 1:
        endpoint = members[0].endpoint
        raise UserError(f"the setups of {endpoint} carry different pricing.hourly_usd ({', '.join(map(str, rates))}); "
                        f"one endpoint has one rate: pass --hourly-usd '{endpoint}=RATE' (or its --bill)")
    return EndpointPricing(hourly_usd=rates[0]) if rates else None


def owners(trial: Trial) -> dict[Hashable, list[Interval] | None]:
    """The split's owners of one attempt: the try that gave its result, and each failed try."""
    parts: dict[Hashable, list[Interval] | None] = {trial.key: trial.intervals()}
    parts.update((trial.key + (t.label,), t.intervals()) for t in trial.tries)
    return parts


def jobs_window(trial: Trial) -> Interval:
    """From the attempt's first try to its finish: `started_at` is the last try's start, so a
    failed try's own calls (before it) stretch the window back."""
    started = min([seconds(trial.result.started_at)] + [s for t in trial.tries for s, _ in t.intervals()])
    return started, seconds(trial.result.finished_at)


def tries_window(tries: list[Try]) -> list[Interval]:
    spans = [s for t in tries for s in t.intervals()]
    return [(min(s for s, _ in spans), max(e for _, e in spans))] if spans else []


def price_group(group: Group, members: list[Setup], costs: Costs) -> Group:
    parts = {trial.key: owners(trial) for setup in members for trial in setup.trials}
    interrupted: dict[str, dict[Hashable, list[Interval] | None]] = {
        setup.name: {u.key + (t.label,): t.intervals() for u in setup.unrecorded for t in u.tries} for setup in members}
    known = {k: v for p in [*parts.values(), *interrupted.values()] for k, v in p.items() if v is not None}
    pricing = group.pricing
    if pricing is None:
        split = None
    elif pricing.bill is not None:
        windows = [jobs_window(t) for s in members for t in s.trials]
        windows += [w for s in members for u in s.unrecorded for w in tries_window(u.tries)]
        group.window = window(windows)
        group.covered = cover(pricing.bill, windows)
        split = group.split = split_bill(known, [c.charged() for c in group.covered])
    else:
        split = group.split = split_hourly(known, pricing.hourly_usd or 0.0)
    basis = "bill split" if pricing is not None and pricing.bill is not None else "hourly split"
    for owner, pieces in parts.items():
        costs.trials[owner] = group_cost(pieces, split, basis, owner)
    for name, pieces in interrupted.items():
        cost = group_cost(pieces, split, basis, None)
        costs.unrecorded[name] = TrialCost(cost.cost_usd, cost.sole_usd, cost.basis, cost.cost_usd)
    return group


def group_cost(pieces: dict[Hashable, list[Interval] | None], split: Split | None, basis: str, owner: Hashable) -> TrialCost:
    if not pieces:
        return TrialCost(Decimal(0), None, "none")
    if any(v is None for v in pieces.values()):
        return TrialCost(None, None, "unknown: model time without model_calls.jsonl", None)
    if split is None:
        return TrialCost(None, None, NO_PRICE, None)
    outside = sum(split.uncovered.get(k, 0.0) for k in pieces)
    if outside > 0:
        return TrialCost(None, None, f"unknown: {outside:.3f} s of generation outside the bill", None)
    cost = sum((split.shares.get(k, Decimal(0)) for k in pieces), Decimal(0))
    retry = sum((split.shares.get(k, Decimal(0)) for k in pieces if k != owner), Decimal(0))
    return TrialCost(cost, sum((split.sole.get(k, Decimal(0)) for k in pieces), Decimal(0)), basis, retry)
