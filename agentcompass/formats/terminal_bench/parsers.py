"""Terminal-Bench's test-output parsers (task.yaml `parser_name`), with the official harness's semantics.

Each parser maps the test output to {test name: status}; the task is resolved when every status
passes (no tests parsed after a summary header counts as resolved, as officially). A ParseError
(no summary, no result markers) leaves the task unresolved. Written from the behaviour of the
terminal-bench 0.2.18 parsers and checked against them in tests/test_terminal_bench_parsers.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable

PASSING = {"passed", "xfail", "skipped"}
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class ParseError(ValueError):
    """The output holds no result this parser can read."""


def parse_pytest(output: str) -> dict[str, str]:
    """pytest -rA: every line after the first `short test summary info` header, the last result per test winning.

    A result line is `STATUS[:] path::name[ - message]`; the key is what follows the first `::`
    (the whole id when there is none), the message is cut from FAILED lines only.
    """
    parts = re.split(r"=+\s*short test summary info\s*=+", output, maxsplit=1, flags=re.IGNORECASE)
    if len(parts) < 2:
        raise ParseError("no pytest `short test summary info` in the test output (did pytest run with -rA?)")
    results: dict[str, str] = {}
    for line in parts[1].splitlines():
        if line.startswith("FAILED") and " - " in line:
            line = line.rsplit(" - ", 1)[0]
        words = line.split(maxsplit=1)
        if len(words) < 2:
            continue
        status = words[0].strip(":")
        if status not in ("PASSED", "FAILED", "SKIPPED", "XFAIL", "XPASS", "ERROR"):
            continue
        name = words[1].strip().split("::", 1)[-1]
        if name:
            results[name] = status.lower()
    return results


def marker_block(output: str, tool: str, required: bool = True) -> str:
    """The text between the last `<tool> results starts here` ... `<tool> results ends here` markers."""
    start, end = f"{tool} results starts here", f"{tool} results ends here"
    if required and (start not in output or end not in output):
        raise ParseError(f"no {tool} results between the markers `{start}` and `{end}` in the test output")
    return output.split(start, 1)[-1].rsplit(end, 1)[0].strip()


def verdict(name: str, passed: bool) -> dict[str, str]:
    return {name: "passed" if passed else "failed"}


def parse_swebench(output: str) -> dict[str, str]:
    return verdict("tests", marker_block(output, "SWEBench") == "PASSED")


def parse_sweperf(output: str) -> dict[str, str]:
    return verdict("tests", marker_block(output, "SWE-Perf") == "PASSED")


def parse_mlebench(output: str) -> dict[str, str]:
    # No markers is no error here: the whole output is then the block.
    return verdict("tests", marker_block(output, "MLEBench", required=False) == "ALL TESTS PASSED")


def parse_swelancer(output: str) -> dict[str, str]:
    text = output.lower()
    if "swe lancer success" in text:
        passed = True
    elif "swe lancer failure" in text:
        passed = False
    else:
        passed = "user_tool" in text and "completed" in text
    return verdict("swelancer_task", passed)


PARSERS: dict[str, Callable[[str], dict[str, str]]] = {
    "pytest": parse_pytest,
    "swebench": parse_swebench,
    "sweperf": parse_sweperf,
    "mlebench": parse_mlebench,
    "swelancer": parse_swelancer,
}


def parse_test_output(parser_name: str, output: str) -> dict[str, str]:
    """{test: status} from the output of run-tests.sh, as seen on a terminal (colour codes dropped)."""
    return PARSERS[parser_name](ANSI.sub("", output))


def resolved(tests: dict[str, str]) -> bool:
    return all(status in PASSING for status in tests.values())
