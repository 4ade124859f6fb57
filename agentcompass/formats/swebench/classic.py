"""Grading of classic SWE-bench rows by swebench 4.1.0's rules, the harness those rows were made for.

Classic rows (princeton-nlp/*, older exports: no `eval_script`, `log_parser`, `eval_type`) were
validated with swebench 4.x, and swebench 5.x grades differently: a skipped FAIL_TO_PASS test
fails there, a non-zero recorded test exit code voids the log, a run with no sign a suite ran
counts as no result, truncated parametrized ids match by prefix, and several pytest parsers
keep more of a line. Each of those flips verdicts on real logs, so these rows are graded here by
4.1.0's rules and their eval script runs as 4.1.0 wrote it (without 5.x's exit-code line). The
differential suite (tests/conformance/) checks every verdict against swebench 4.1.0 itself.

Written from 4.1.0's behaviour, not its code: swebench 4.1.0 and 5.0.2 cannot share one
environment, and 5.0.2 is the one installed for 5.x rows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

PASSED, FAILED, SKIPPED, ERROR, XFAIL = "PASSED", "FAILED", "SKIPPED", "ERROR", "XFAIL"
STATUSES = (FAILED, PASSED, SKIPPED, ERROR, XFAIL)
START_TEST_OUTPUT = ">>>>> Start Test Output"
END_TEST_OUTPUT = ">>>>> End Test Output"
# Any of these anywhere in the log: no result (4.1.0 get_logs_eval).
BAD_CODES = (">>>>> Patch Apply Failed", ">>>>> Reset Failed", ">>>>> Tests Errored", ">>>>> Tests Timed Out")
REPORT_KEYS = ("FAIL_TO_PASS", "PASS_TO_PASS", "FAIL_TO_FAIL", "PASS_TO_FAIL")

Parser = Callable[[str], dict[str, str]]


# -- log parsers (4.1.0's per-repository parsers of the Python repositories) ---------------------

def status_first(line: str) -> list[str] | None:
    """`STATUS name ...` split into words; FAILED lines lose their ` - ` separators first."""
    if not line.startswith(STATUSES):
        return None
    if line.startswith(FAILED):
        line = line.replace(" - ", " ")
    words = line.split()
    return words if len(words) > 1 else None


def parse_pytest(log: str) -> dict[str, str]:
    statuses: dict[str, str] = {}
    for line in log.split("\n"):
        words = status_first(line)
        if words:
            statuses[words[1]] = words[0]
    return statuses


OPTION = re.compile(r"(.*?)\[(.*)\]")


def parse_pytest_options(log: str) -> dict[str, str]:
    """pytest ids whose parameter is an absolute path keep only its last part (`[/a/b/c]` -> `[/c]`)."""
    statuses: dict[str, str] = {}
    for line in log.split("\n"):
        words = status_first(line)
        if not words:
            continue
        name = words[1]
        option = OPTION.search(name)
        if option:
            main, param = option.groups()
            if param.startswith("/") and not param.startswith("//") and "*" not in param:
                param = "/" + param.split("/")[-1]
            name = f"{main}[{param}]"
        statuses[name] = words[0]
    return statuses


CONTROL = str.maketrans("", "", "".join(chr(c) for c in range(1, 32)))


def parse_pytest_v2(log: str) -> dict[str, str]:
    """Colour codes and control characters removed; `name STATUS` lines of old pytest read too."""
    statuses: dict[str, str] = {}
    for line in log.split("\n"):
        line = re.sub(r"\[(\d+)m", "", line).translate(CONTROL)
        if line.startswith(STATUSES):
            words = status_first(line) or []
            if len(words) >= 2:
                statuses[words[1]] = words[0]
        elif line.endswith(STATUSES):
            words = line.split()
            if len(words) >= 2:
                statuses[words[0]] = words[1]
    return statuses


def parse_matplotlib(log: str) -> dict[str, str]:
    return parse_pytest(log.replace("MouseButton.LEFT", "1").replace("MouseButton.RIGHT", "3"))


def parse_seaborn(log: str) -> dict[str, str]:
    """4.1.0 reads word 1 of a bare `FAILED` line and fails; that IndexError is kept (it is 4.1.0's verdict)."""
    statuses: dict[str, str] = {}
    for line in log.split("\n"):
        if line.startswith(FAILED):
            statuses[line.split()[1]] = FAILED
        elif f" {PASSED} " in line:
            words = line.split()
            if words[1] == PASSED:
                statuses[words[0]] = PASSED
        elif line.startswith(PASSED):
            statuses[line.split()[1]] = PASSED
    return statuses


def parse_django(log: str) -> dict[str, str]:
    from swebench.harness.log_parsers.python import parse_log_django  # the same in 4.1.0 and 5.0.2

    return parse_log_django(log, None)


def parse_sympy(log: str) -> dict[str, str]:
    from swebench.harness.log_parsers.python import parse_log_sympy  # the same in 4.1.0 and 5.0.2

    return parse_log_sympy(log, None)


PARSERS: dict[str, Parser] = {
    "astropy/astropy": parse_pytest_v2, "django/django": parse_django,
    "marshmallow-code/marshmallow": parse_pytest, "matplotlib/matplotlib": parse_matplotlib,
    "mwaskom/seaborn": parse_seaborn, "pallets/flask": parse_pytest, "psf/requests": parse_pytest_options,
    "pvlib/pvlib-python": parse_pytest, "pydata/xarray": parse_pytest, "pydicom/pydicom": parse_pytest_options,
    "pylint-dev/astroid": parse_pytest, "pylint-dev/pylint": parse_pytest_options,
    "pytest-dev/pytest": parse_pytest, "pyvista/pyvista": parse_pytest, "scikit-learn/scikit-learn": parse_pytest_v2,
    "sqlfluff/sqlfluff": parse_pytest, "sphinx-doc/sphinx": parse_pytest_v2, "sympy/sympy": parse_sympy,
}


# -- the report -----------------------------------------------------------------------------------

@dataclass
class ClassicSpec:
    """What grading a classic row needs (4.1.0's TestSpec, the parts grading reads)."""
    instance_id: str
    repo: str
    FAIL_TO_PASS: list[str]
    PASS_TO_PASS: list[str]
    eval_script: str
    image_assets: dict[str, Any] = field(default_factory=dict)


def statuses_of(repo: str, content: str) -> tuple[dict[str, str], bool]:
    """The status map of a log and whether it holds a test run (4.1.0 get_logs_eval)."""
    if any(code in content for code in BAD_CODES):
        return {}, False
    if START_TEST_OUTPUT not in content or END_TEST_OUTPUT not in content:
        return {}, False
    parser = PARSERS.get(repo, parse_pytest)
    statuses = parser(content.split(START_TEST_OUTPUT)[1].split(END_TEST_OUTPUT)[0])
    return (statuses or parser(content)), True  # results outside the markers count too


def tests_report(statuses: dict[str, str], spec: ClassicSpec) -> dict[str, dict[str, list[str]]]:
    """A listed test succeeds when PASSED or XFAIL, fails when FAILED, ERROR or absent; otherwise
    (SKIPPED) it is in neither list, so a skipped FAIL_TO_PASS test does not stop a resolution."""
    report: dict[str, dict[str, list[str]]] = {key: {"success": [], "failure": []} for key in REPORT_KEYS}
    for key, tests in (("FAIL_TO_PASS", spec.FAIL_TO_PASS), ("PASS_TO_PASS", spec.PASS_TO_PASS)):
        for test in tests:
            status = statuses.get(test)
            if status in (PASSED, XFAIL):
                report[key]["success"].append(test)
            elif status is None or status in (FAILED, ERROR):
                report[key]["failure"].append(test)
    return report


def share(outcomes: dict[str, list[str]]) -> float:
    total = len(outcomes["success"]) + len(outcomes["failure"])
    return len(outcomes["success"]) / total if total else 1.0


def get_eval_report(spec: ClassicSpec, prediction: dict[str, Any], log_path: str,
                    include_tests_status: bool = True) -> dict[str, dict[str, Any]]:
    """The per-instance report 4.1.0's get_eval_report writes to report.json."""
    instance_id = prediction["instance_id"]
    entry: dict[str, Any] = {"patch_is_None": False, "patch_exists": False,
                             "patch_successfully_applied": False, "resolved": False}
    if prediction["model_patch"] is None:
        entry["patch_is_None"] = True
        return {instance_id: entry}
    entry["patch_exists"] = True
    with open(log_path) as log:  # the platform's text decoding, as 4.1.0 reads it
        statuses, found = statuses_of(spec.repo, log.read())
    if not found:
        return {instance_id: entry}
    entry["patch_successfully_applied"] = True
    report = tests_report(statuses, spec)
    entry["resolved"] = share(report["FAIL_TO_PASS"]) == 1 and share(report["PASS_TO_PASS"]) == 1
    if include_tests_status:
        entry["tests_status"] = report
    return {instance_id: entry}
