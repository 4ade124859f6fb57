"""The SWE-bench format: rows (data), classic eval scripts (classic), the verdict on an eval log (grading), grading
per instance or in one batch (batch) over the paths and commands they share (constants), and the official-shaped
reports (report)."""

from agentcompass.formats.swebench.format import SwebenchFormat

__all__ = ["SwebenchFormat"]
