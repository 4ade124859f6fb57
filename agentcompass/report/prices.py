"""Hosted models' cost re-derived by the report: tokens x the model's prices, cache reads and cache
writes each at their own price. Prices come from the preset's `pricing` (per million tokens), else
litellm's bundled price map (read offline). What a harness or CLI wrote as its cost is kept beside."""

from __future__ import annotations

import os
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

MTOK = Decimal(1_000_000)


@dataclass(frozen=True)
class TokenPrices:
    """USD per token."""

    input: Decimal
    output: Decimal
    cache_read: Decimal
    cache_write: Decimal
    source: str  # preset | litellm

    def cost(self, tokens: "Tokens") -> Decimal:
        fresh = tokens.tokens_in - tokens.cached - tokens.cache_write
        return (fresh * self.input + tokens.cached * self.cache_read + tokens.cache_write * self.cache_write
                + tokens.tokens_out * self.output)


@dataclass(frozen=True)
class Tokens:
    """tokens_in counts every prompt token: fresh input, cache reads (cached) and cache writes."""

    tokens_in: int = 0
    tokens_out: int = 0
    cached: int = 0
    cache_write: int = 0

    def __add__(self, other: "Tokens") -> "Tokens":
        return Tokens(self.tokens_in + other.tokens_in, self.tokens_out + other.tokens_out,
                      self.cached + other.cached, self.cache_write + other.cache_write)


def of_calls(calls: list[dict[str, Any]]) -> Tokens | None:
    """The tokens of answered calls (model_calls.jsonl); None when a reply's counts are unknown."""
    total = Tokens()
    for call in calls:
        if call.get("status") != "ok":
            continue
        if call.get("tokens_in") is None or call.get("tokens_out") is None:
            return None
        total = total + Tokens(int(call["tokens_in"]), int(call["tokens_out"]), int(call.get("tokens_cached") or 0),
                               int(call.get("tokens_cache_write") or 0))
    return total


def usd(value: Any) -> Decimal:
    return Decimal(str(value))


def preset_prices(pricing: dict[str, Any]) -> TokenPrices | None:
    if pricing.get("input_per_mtok") is None and pricing.get("output_per_mtok") is None:
        return None
    given = usd(pricing.get("input_per_mtok") or 0) / MTOK
    read, write = pricing.get("cached_per_mtok"), pricing.get("cache_write_per_mtok")
    return TokenPrices(given, usd(pricing.get("output_per_mtok") or 0) / MTOK,
                       given if read is None else usd(read) / MTOK, given if write is None else usd(write) / MTOK, "preset")


def litellm_prices(name: str) -> TokenPrices | None:
    """litellm's bundled map, by the model's name as given, then without its provider prefix."""
    try:
        os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # read at import time: no download
        import litellm
    except ImportError:
        return None
    for candidate in (name, name.split("/", 1)[-1]):
        entry = litellm.model_cost.get(candidate)
        if entry and entry.get("input_cost_per_token") is not None:
            given = usd(entry["input_cost_per_token"])
            read, write = entry.get("cache_read_input_token_cost"), entry.get("cache_creation_input_token_cost")
            return TokenPrices(given, usd(entry.get("output_cost_per_token") or 0), given if read is None else usd(read),
                               given if write is None else usd(write), "litellm")
    return None


def prices_of(model: dict[str, Any]) -> TokenPrices | None:
    """The model's per-token prices: the preset's, else litellm's map; None when neither knows it."""
    return preset_prices(model.get("pricing") or {}) or litellm_prices(str(model.get("name") or ""))
