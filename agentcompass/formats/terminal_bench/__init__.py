"""The Terminal-Bench 1 format: task dirs, compose projects (compose), tmux and plain shells (tmux, shell), and
the official parsers of test output (parsers)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentcompass.core.faces import lazy_attributes

if TYPE_CHECKING:
    from agentcompass.formats.terminal_bench.format import TerminalBenchFormat

PUBLIC = {"TerminalBenchFormat": "agentcompass.formats.terminal_bench.format"}
__all__ = sorted(PUBLIC)

__getattr__ = lazy_attributes(__name__, PUBLIC)
