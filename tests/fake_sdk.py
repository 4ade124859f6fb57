"""What the recording SDK fakes (fake_modal, fake_gcp) share."""

from __future__ import annotations

from typing import Any, Callable


def jsonable(value: Any, describe: Callable[[Any], Any] = str) -> Any:
    """A recorded call's arguments as JSON: plain values as they are, containers item by item, any
    other object through `describe` (each SDK has its own way of showing its objects)."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): jsonable(v, describe) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v, describe) for v in value]
    return describe(value)
