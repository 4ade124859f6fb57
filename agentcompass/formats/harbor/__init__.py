"""The Harbor task format (Terminal-Bench 2, Harbor registries): task dirs read by dataset and fields,
checked against Harbor's schema (schema), graded by its verifier (verifier) after [[verifier.collect]] (collect)."""

from agentcompass.formats.harbor.format import HarborFormat

__all__ = ["HarborFormat"]
