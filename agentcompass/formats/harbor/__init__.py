"""The Harbor task format (Terminal-Bench 2, Harbor registries): task dirs listed by dataset, read into tasks by
task, checked against Harbor's schema (schema, fields); the sandbox prepared around the agent (phases), collected
from by [[verifier.collect]] (collect) and graded by test.sh's rewards (rewards) where verifier says it runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentcompass.core.faces import lazy_attributes

if TYPE_CHECKING:
    from agentcompass.formats.harbor.format import HarborFormat

PUBLIC = {"HarborFormat": "agentcompass.formats.harbor.format"}
__all__ = sorted(PUBLIC)

__getattr__ = lazy_attributes(__name__, PUBLIC)
