"""A config section validated against its schema, and pydantic's first error as one line that names the
key, where it was set, and what is allowed (a leaf: config and checks both use it)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from agentcompass.core.errors import UserError
from agentcompass.core.provenance import Provenance
from agentcompass.core.registry import closest


def validate(schema: type[BaseModel], data: dict[str, Any], key: str, provenance: Provenance) -> Any:
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        raise UserError(describe_validation(exc, schema, key, provenance)) from exc


def describe_validation(exc: ValidationError, schema: type[BaseModel], key: str, provenance: Provenance,
                        common: list[str] | None = None) -> str:
    """One line for the first error; `common`: the keys also allowed beside the schema's own at the top
    (a harness's or env's name, description, ... beside its class's settings)."""
    err = exc.errors()[0]
    where = ".".join(str(p) for p in (key, *err["loc"]))
    origin = provenance.describe(where)
    if err["type"] == "extra_forbidden":
        allowed = fields_at(schema, err["loc"][:-1])
        if common and len(err["loc"]) == 1:
            allowed = [*allowed, *(name for name in common if name not in allowed)]
        hint = closest(str(err["loc"][-1]), allowed)
        return f"unknown key '{where}'{origin}{hint}; allowed keys: {', '.join(allowed) or 'none'}"
    if err["type"] == "missing":
        return f"missing key '{where}'{origin}; add it to the YAML or pass {where}=VALUE"
    return f"invalid value for '{where}'{origin}: {err['msg']} (got {err.get('input')!r})"


def fields_at(schema: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The keys a (nested) schema allows at `loc`, for 'allowed keys' in messages."""
    for part in loc:
        field_info = schema.model_fields.get(str(part))
        annotation = getattr(field_info, "annotation", None)
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return []
        schema = annotation
    return list(schema.model_fields)
