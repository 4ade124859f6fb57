"""The SWE-bench format: rows (data), classic eval scripts (classic), the verdict on an eval log (grading), grading
per instance or in one batch (batch) over the paths and commands they share (constants), and the official-shaped
reports (report)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentcompass.core.faces import lazy_attributes

if TYPE_CHECKING:
    from agentcompass.formats.swebench.format import SwebenchFormat

PUBLIC = {"SwebenchFormat": "agentcompass.formats.swebench.format"}
__all__ = sorted(PUBLIC)

__getattr__ = lazy_attributes(__name__, PUBLIC)
