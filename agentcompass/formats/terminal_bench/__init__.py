"""The Terminal-Bench 1 format: task dirs, compose projects (compose), tmux and plain shells (tmux, shell), and
the official parsers of test output (parsers)."""

from agentcompass.formats.terminal_bench.format import TerminalBenchFormat

__all__ = ["TerminalBenchFormat"]
