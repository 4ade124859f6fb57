"""The Harbor task format (Terminal-Bench 2, Harbor registries): task dirs listed by dataset, read into tasks by
task, checked against Harbor's schema (schema, fields); the sandbox prepared around the agent (phases), collected
from by [[verifier.collect]] (collect) and graded by test.sh's rewards (rewards) where verifier says it runs."""

from agentcompass.formats.harbor.format import HarborFormat

__all__ = ["HarborFormat"]
