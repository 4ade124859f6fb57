"""Hosted models' cost re-derived by the report: tokens x the model's prices, cache reads and cache
writes each at their own price. Prices come from the preset's `pricing` (per million tokens), else
litellm's bundled price map (read offline). What a harness or CLI wrote as its cost is kept beside."""

from __future__ import annotations

import importlib.util
import json
import os
import re
from dataclasses import dataclass
from decimal import Decimal
from functools import cache
from typing import Any

MTOK = Decimal(1_000_000)


@dataclass(frozen=True)
class Rates:
    """USD per token."""

    input: Decimal
    output: Decimal
    cache_read: Decimal
    cache_write: Decimal


@dataclass(frozen=True)
class TokenPrices:
    base: Rates
    source: str  # preset | litellm
    tiers: tuple[tuple[int, Rates], ...] = ()  # (prompt tokens, rates of a request with more), highest first

    def cost(self, requests: list["Tokens"]) -> Decimal:
        """Each request at its own rates: a long prompt may be priced higher (litellm's `_above_200k_tokens`)."""
        total = Decimal(0)
        for tokens in requests:
            rates = next((r for above, r in self.tiers if tokens.per_request and tokens.tokens_in > above), self.base)
            fresh = tokens.tokens_in - tokens.cached - tokens.cache_write
            total += (fresh * rates.input + tokens.cached * rates.cache_read + tokens.cache_write * rates.cache_write
                      + tokens.tokens_out * rates.output)
        return total


@dataclass(frozen=True)
class Tokens:
    """tokens_in counts every prompt token: fresh input, cache reads (cached) and cache writes.
    `per_request` is False for a trial's totals, whose requests' sizes are unknown (base rates)."""

    tokens_in: int = 0
    tokens_out: int = 0
    cached: int = 0
    cache_write: int = 0
    per_request: bool = True


def of_calls(calls: list[dict[str, Any]]) -> list[Tokens] | None:
    """The tokens of each answered call (model_calls.jsonl); None when a reply's counts are unknown."""
    out = []
    for call in calls:
        if call.get("status") != "ok":
            continue
        if call.get("tokens_in") is None or call.get("tokens_out") is None:
            return None
        out.append(Tokens(int(call["tokens_in"]), int(call["tokens_out"]), int(call.get("tokens_cached") or 0),
                          int(call.get("tokens_cache_write") or 0)))
    return out


def usd(value: Any) -> Decimal:
    return Decimal(str(value))


def preset_prices(pricing: dict[str, Any]) -> TokenPrices | None:
    if pricing.get("input_per_mtok") is None and pricing.get("output_per_mtok") is None:
        return None
    per_token = {k: None if v is None else usd(v) / MTOK for k, v in pricing.items() if k.endswith("_per_mtok")}
    return TokenPrices(rates(per_token.get("input_per_mtok"), per_token.get("output_per_mtok"),
                             per_token.get("cached_per_mtok"), per_token.get("cache_write_per_mtok")), "preset")


def rates(given: Decimal | None, output: Decimal | None, read: Decimal | None, write: Decimal | None,
          fallback: Rates | None = None) -> Rates:
    """Missing cache prices are the input price; a tier's missing prices are the base ones."""
    given = given if given is not None else fallback.input if fallback else Decimal(0)
    return Rates(given, output if output is not None else fallback.output if fallback else Decimal(0),
                 read if read is not None else fallback.cache_read if fallback else given,
                 write if write is not None else fallback.cache_write if fallback else given)


TIER = re.compile(r"input_cost_per_token_above_(\d+)k_tokens")


PRICE_MAP = "model_prices_and_context_window_backup.json"  # what litellm reads offline (LITELLM_LOCAL_MODEL_COST_MAP)


@cache
def litellm_price_map() -> dict[str, Any]:
    """litellm's bundled price map, read from its file without importing litellm (seconds of CPU a report
    on a small run does not need to pay); {} when litellm is not installed."""
    spec = importlib.util.find_spec("litellm")  # finds the package without running it
    if spec is None or not spec.submodule_search_locations:
        return {}
    for folder in spec.submodule_search_locations:
        path = os.path.join(folder, PRICE_MAP)
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as handle:
                return json.load(handle)
    return {}


def litellm_prices(name: str) -> TokenPrices | None:
    """litellm's bundled map, by the model's name as given, then without its provider prefix."""
    model_cost = litellm_price_map()
    for candidate in (name, name.split("/", 1)[-1]):
        entry = model_cost.get(candidate)
        if entry and entry.get("input_cost_per_token") is not None:
            def price(key: str) -> Decimal | None:
                return None if entry.get(key) is None else usd(entry[key])

            base = rates(price("input_cost_per_token"), price("output_cost_per_token"),
                         price("cache_read_input_token_cost"), price("cache_creation_input_token_cost"))
            tiers = []
            for key in entry:
                if (match := TIER.fullmatch(key)) and entry[key] is not None:
                    above = f"_above_{match[1]}k_tokens"
                    tiers.append((int(match[1]) * 1000, rates(
                        price("input_cost_per_token" + above), price("output_cost_per_token" + above),
                        price("cache_read_input_token_cost" + above), price("cache_creation_input_token_cost" + above), base)))
            return TokenPrices(base, "litellm", tuple(sorted(tiers, reverse=True)))
    return None


def prices_of(model: dict[str, Any]) -> TokenPrices | None:
    """The model's per-token prices: the preset's, else litellm's map; None when neither knows it, or
    when the preset says `pricing.billing: reported` (the harness's own cost is the cost, as for an
    imported study that kept costs but not the cache split its tokens would need to be priced)."""
    if (model.get("pricing") or {}).get("billing") == "reported":
        return None
    return preset_prices(model.get("pricing") or {}) or litellm_prices(str(model.get("name") or ""))
