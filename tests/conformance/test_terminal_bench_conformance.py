"""Terminal-Bench vs terminal-bench 0.2.18 itself: its parsers on the captured test outputs (real pytest
8.4 and 9.0 runs, the other parsers' shapes) and on generated edge cases, through its own parser
factory and _is_resolved; and solution.yaml files through its TerminalCommand model vs our oracle's reader."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from conformance.conftest import anchor_python, check_divergences, run_driver

from agentcompass.formats.terminal_bench.format import grade_tests, last_rows, solution_keystrokes
from agentcompass.formats.terminal_bench.parsers import PASSING, ParseError, parse_test_output

ANCHOR = "terminal-bench 0.2.18"
CAPTURES = Path(__file__).resolve().parent.parent / "data" / "terminal_bench_parsers" / "outputs"
SUMMARY = "=========================== short test summary info ============================"


def generated() -> dict[str, tuple[str, str]]:
    """name -> (parser, output): shapes the captures lack."""
    many = "\n".join(f"PASSED tests/test_x.py::test_{n}" for n in range(3000))
    return {
        "pane-tail-of-a-long-run": ("pytest", last_rows(f"{SUMMARY}\n{many}\nFAILED tests/test_x.py::test_end\n")),
        "long-line-wrapped-rows": ("pytest", last_rows(SUMMARY + "\nPASSED tests/t.py::test_" + "a" * 400 + "\n")),
        "unicode-separators": ("pytest", f"{SUMMARY}\nPASSED tests/t.py::test_a\u2028tail\nPASSED tests/t.py::test_b\n"),
        "tab-separated": ("pytest", f"{SUMMARY}\nPASSED\ttests/t.py::test_a\n"),
        "xfail-and-skipped": ("pytest", f"{SUMMARY}\nXFAIL tests/t.py::test_a - reason\nSKIPPED [1] tests/t.py:3: no\n"),
        "xpass": ("pytest", f"{SUMMARY}\nXPASS tests/t.py::test_a\n"),
        "param-with-spaces": ("pytest", f"{SUMMARY}\nPASSED tests/t.py::test_a[x y]\nFAILED tests/t.py::test_a[x z] - e\n"),
        "two-summaries": ("pytest", f"{SUMMARY}\nFAILED tests/t.py::test_a\n{SUMMARY}\nPASSED tests/t.py::test_a\n"),
        "empty-output": ("pytest", ""),
        "cr-only-lines": ("pytest", f"{SUMMARY}\rPASSED tests/t.py::test_a\rFAILED tests/t.py::test_b\r"),
    }


def test_parsers_give_the_official_verdicts(tmp_path, tally, allowed):
    cases = {path.name: (path.name.rsplit(".", 2)[-2], path.read_text(encoding="utf-8")) for path in sorted(CAPTURES.iterdir())}
    cases |= generated()
    official = run_driver(anchor_python(ANCHOR), "terminal_bench_official.py",
                          {"command": "parse", "cases": [{"parser": p, "output": o} for p, o in cases.values()]})
    found: dict[str, list[str]] = {"terminal-bench/verdict": [], "terminal-bench/tests": [],
                                   "terminal-bench-colour-codes": []}
    same = 0
    for (name, (parser, output)), theirs in zip(cases.items(), official, strict=True):
        try:
            tests = parse_test_output(parser, output)
            ours = {"tests": tests, "resolved": grade_tests(tests).passed}
        except ParseError:
            ours = {"error": "ParseError"}
        verdict = ("error" if "error" in theirs else theirs["resolved"]), ("error" if "error" in ours else ours["resolved"])
        if verdict[0] != verdict[1] and "\x1b[" in output:
            found["terminal-bench-colour-codes"].append(f"{name}: official {verdict[0]}, ours {verdict[1]}")
        elif verdict[0] != verdict[1]:
            found["terminal-bench/verdict"].append(f"{name}: official {verdict[0]}, ours {verdict[1]}")
        elif "tests" in theirs and theirs["tests"] != {k: "passed" if v in PASSING else "failed"
                                                        for k, v in ours["tests"].items()}:
            found["terminal-bench/tests"].append(name)
        else:
            same += 1
    tally.record(ANCHOR, "parser verdicts", same, len(cases))
    check_divergences(found, allowed)


SOLUTIONS = {
    "strings.yaml": "- echo hi\n- ls\n",
    "mappings.yaml": "- {command: make, block: true, max_timeout_sec: 600}\n- {command: C-c, append_enter: false}\n",
    "unknown-keys.yaml": "- {command: make, comment: builds it, timeout: 5}\n",
    "coerced.yaml": "- {command: make, block: 'true', max_timeout_sec: '60'}\n",
    "bad-bool.yaml": "- {command: make, block: maybe}\n",
    "number-command.yaml": "- {command: 42}\n",
    "empty.yaml": "",
}


def test_solution_yaml_read_as_terminal_command(tmp_path, tally, allowed):
    paths = []
    for name, text in SOLUTIONS.items():
        (tmp_path / name).write_text(text)
        paths.append(tmp_path / name)
    official = run_driver(anchor_python(ANCHOR), "terminal_bench_official.py",
                          {"command": "solution", "paths": [str(p) for p in paths]})
    found: dict[str, list[str]] = {"terminal-bench/solution-yaml": [], "terminal-bench-lenient-solution-yaml": []}
    same = 0
    for path, theirs in zip(paths, official, strict=True):
        try:
            ours = {"commands": [dataclasses.asdict(k) for k in solution_keystrokes(path)]}
        except ValueError:
            ours = {"error": "ValueError"}
        if "error" in theirs and "error" not in ours:
            found["terminal-bench-lenient-solution-yaml"].append(path.name)
        elif ("error" in theirs) != ("error" in ours) or theirs.get("commands") != ours.get("commands"):
            found["terminal-bench/solution-yaml"].append(f"{path.name}: official {theirs}, ours {ours}")
        else:
            same += 1
    tally.record(ANCHOR, "solution.yaml files read", same, len(paths))
    check_divergences(found, allowed)
