"""A preset's tier over a client's request: which fields of the client's go before the tier's are set, so a request
carries its tier whatever the client sent (for every API the gateway speaks)."""

from __future__ import annotations

from typing import Any

KEPT_FIELDS = {("max_tokens",), ("model",), ("messages",)}  # never removed, even when a tier sets them
# Set and removed whole, never merged: Anthropic's `thinking` is a tagged union, so a part of the client's
# (Claude Code's `display`) left beside another tier's is no request the API takes.
WHOLE_FIELDS = {"thinking"}


def leaf_paths(fields: dict[str, Any], prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    paths: set[tuple[str, ...]] = set()
    for key, value in fields.items():
        path = (*prefix, key)
        whole = not prefix and key in WHOLE_FIELDS
        paths |= leaf_paths(value, path) if isinstance(value, dict) and value and not whole else {path}
    return paths


def cleared_fields(reasoning_map: dict[str, dict[str, Any]], tier: dict[str, Any]) -> frozenset[tuple[str, ...]]:
    """What other tiers set and this one does not: a client's own value there would change the tier."""
    others = set().union(*(leaf_paths(fields) for fields in reasoning_map.values())) if reasoning_map else set()
    return frozenset(others - leaf_paths(tier) - KEPT_FIELDS)


def remove_path(body: dict[str, Any], path: tuple[str, ...]) -> None:
    """Delete body[a][b]...; a parent left empty goes too."""
    parent = body.get(path[0])
    if len(path) == 1:
        body.pop(path[0], None)
    elif isinstance(parent, dict):
        remove_path(parent, path[1:])
        if not parent:
            body.pop(path[0])


__all__ = ["KEPT_FIELDS", "WHOLE_FIELDS", "cleared_fields", "leaf_paths", "remove_path"]
