"""The Harbor task format (Terminal-Bench 2, Harbor registries): task dirs read by dataset and fields,
checked against Harbor's schema (schema), graded by its verifier (verifier) after [[verifier.collect]] (collect)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentcompass.core.faces import lazy_attributes

if TYPE_CHECKING:
    from agentcompass.formats.harbor.format import HarborFormat

PUBLIC = {"HarborFormat": "agentcompass.formats.harbor.format"}
__all__ = sorted(PUBLIC)

__getattr__ = lazy_attributes(__name__, PUBLIC)
