"""The CooperBench format: feature pairs of one repository, solved by two agents together (coop), graded
by each feature's tests (grade)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentcompass.core.faces import lazy_attributes

if TYPE_CHECKING:
    from agentcompass.formats.cooperbench.format import CooperbenchFormat

PUBLIC = {"CooperbenchFormat": "agentcompass.formats.cooperbench.format"}
__all__ = sorted(PUBLIC)

__getattr__ = lazy_attributes(__name__, PUBLIC)
