"""The CooperBench format: feature pairs of one repository, solved by two agents together (coop), graded
by each feature's tests (grade)."""

from agentcompass.formats.cooperbench.format import CooperbenchFormat

__all__ = ["CooperbenchFormat"]
