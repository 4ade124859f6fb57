"""Our Terminal-Bench parsers give the official harness's verdicts, on real pytest output and on edge cases.

The official verdicts in data/terminal_bench_parsers/official_verdicts.json were made by running the
terminal-bench 0.2.18 parsers on the committed outputs (see capture.py there for how): terminal-bench
needs Python 3.12, this project runs on 3.11, so the oracle cannot run live in CI.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentcompass.formats.terminal_bench.parsers import PASSING, ParseError, parse_test_output, resolved

DATA = Path(__file__).resolve().parent / "data" / "terminal_bench_parsers"
OFFICIAL = json.loads((DATA / "official_verdicts.json").read_text())


def read(name: str) -> str:
    with open(DATA / "outputs" / name, newline="") as handle:
        return handle.read()


def ours(parser: str, text: str) -> dict[str, object]:
    try:
        tests = parse_test_output(parser, text)
    except ParseError:
        return {"results": None, "resolved": False}
    return {"results": {k: "passed" if v in PASSING else "failed" for k, v in tests.items()}, "resolved": resolved(tests)}


@pytest.mark.parametrize("name", sorted(OFFICIAL))
def test_same_verdict_and_per_test_results_as_the_official_parser(name: str) -> None:
    official = OFFICIAL[name]
    assert ours(official["parser"], read(name)) == {"results": official["results"], "resolved": official["resolved"]}


def test_the_data_covers_several_pytest_versions_and_every_parser() -> None:
    versions = {name.split("__pytest-")[1].rsplit(".", 2)[0] for name in OFFICIAL if "__pytest-" in name}
    assert {v.split(".")[0] for v in versions} >= {"8", "9"}
    assert {v["parser"] for v in OFFICIAL.values()} == {"pytest", "swebench", "sweperf", "mlebench", "swelancer"}


@pytest.mark.parametrize(("name", "resolved_officially"), [
    ("rerun-fail-then-pass__pytest-9.0.3.pytest.txt", True),  # the last result per test wins
    ("pass-then-error-line__pytest-9.0.3.pytest.txt", False),  # an `ERROR:` line after the summary fails
    ("header-without-results.pytest.txt", True),  # a summary with no result lines is resolved
    ("no-summary.pytest.txt", False),
])
def test_the_cases_the_issue_names(name: str, resolved_officially: bool) -> None:
    assert OFFICIAL[name]["resolved"] is resolved_officially
    assert ours("pytest", read(name))["resolved"] is resolved_officially
