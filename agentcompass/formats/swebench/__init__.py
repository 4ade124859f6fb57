"""The SWE-bench format: rows (data), classic eval scripts (classic), grading per instance or in one batch
(batch), and the official-shaped reports (report)."""

from agentcompass.formats.swebench.format import SwebenchFormat

__all__ = ["SwebenchFormat"]
