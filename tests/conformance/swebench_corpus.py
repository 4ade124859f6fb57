"""A corpus of SWE-bench eval logs: every status shape the graders meet, on rows of every classic
repository (the Lite sample's real rows plus one made-up row per other repository).

A case is (row, log, prediction). The log is what the eval script prints: `set -x` traces, the
start/end markers, the test runner's lines in the repository's own style, and (5.x scripts only)
the recorded test exit code after the end marker.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent.parent / "data" / "swebench-lite-sample.json"
START, END, EXIT = ">>>>> Start Test Output", ">>>>> End Test Output", ">>>>> Test Exit Code"

TEST_PATCH = """diff --git a/{path} b/{path}
--- a/{path}
+++ b/{path}
@@ -1,2 +1,3 @@
 import os
+import sys
 
"""
# Test-file path per repository family (django runs modules, sympy names bare functions).
MADE_UP_REPOS = ["astropy/astropy", "marshmallow-code/marshmallow", "matplotlib/matplotlib", "mwaskom/seaborn",
                 "pallets/flask", "psf/requests", "pvlib/pvlib-python", "pydata/xarray", "pydicom/pydicom",
                 "pylint-dev/astroid", "pylint-dev/pylint", "pyvista/pyvista", "sphinx-doc/sphinx",
                 "sqlfluff/sqlfluff"]


def style(repo: str) -> str:
    if repo == "django/django":
        return "django"
    if repo == "sympy/sympy":
        return "sympy"
    return "pytest"


def tests_for(repo: str, tag: str) -> tuple[list[str], list[str]]:
    """FAIL_TO_PASS and PASS_TO_PASS names in the repository's own id style."""
    if style(repo) == "django":
        return ([f"test_fix_{tag} (app.tests.FixTests)"], [f"test_keep_{tag} (app.tests.KeepTests)",
                                                           f"test_more_{tag} (app.tests.KeepTests)"])
    if style(repo) == "sympy":
        return [f"test_fix_{tag}"], [f"test_keep_{tag}", f"test_more_{tag}"]
    return ([f"tests/test_fix.py::test_fix_{tag}"],
            [f"tests/test_keep.py::test_keep_{tag}", "tests/test_keep.py::TestMore::test_more[1-2]"])


def line(repo: str, name: str, status: str, old_style: bool = False) -> str:
    """One test outcome as the repository's runner prints it."""
    kind = style(repo)
    if kind == "django":
        return {"PASSED": f"{name} ... ok", "FAILED": f"{name} ... FAIL", "ERROR": f"{name} ... ERROR",
                "SKIPPED": f"{name} ... skipped 'needs db'", "XFAIL": f"{name} ... expected failure"}[status]
    if kind == "sympy":
        return {"PASSED": f"{name} ok", "FAILED": f"{name} F", "ERROR": f"{name} E", "SKIPPED": f"{name} s",
                "XFAIL": f"{name} f"}[status]
    if old_style:
        return f"{name} {status}"
    if status == "FAILED":
        return f"FAILED {name} - AssertionError: assert 1 == 2"
    return f"{status} {name}"


def log_of(body: list[str], exit_code: int | None, tail: list[str] = (), head: list[str] = ()) -> str:
    out = ["+ source /opt/miniconda3/bin/activate", "+ cd /testbed", *head, f"+ : '{START}'", *body]
    if exit_code is not None:
        out.append(f"+ SWEBENCH_TEST_EXIT_CODE={exit_code}")
    out.append(f"+ : '{END}'")
    if exit_code is not None:
        out.append(f"{EXIT}: {exit_code}")
    out += ["+ git checkout abc123 tests/test_fix.py", *tail]
    return "\n".join(out) + "\n"


def scenarios(repo: str, f2p: list[str], p2p: list[str], fivex: bool) -> dict[str, tuple[str, list[str], list[str]]]:
    """name -> (log, FAIL_TO_PASS, PASS_TO_PASS) for one row."""
    code = (lambda c: c) if fivex else (lambda c: None)  # classic scripts record no exit code
    every = f2p + p2p

    def run(statuses: dict[str, str], exit_code: int = 0, extra: list[str] = (), old: bool = False) -> str:
        body = ["collected 3 items", *[line(repo, t, statuses.get(t, "PASSED"), old) for t in every], *extra]
        if style(repo) == "pytest":
            body.append("===== 3 passed in 0.12s =====")
        return log_of(body, code(exit_code))

    cases = {
        "all_pass": (run({}), f2p, p2p),
        "f2p_fails": (run({f2p[0]: "FAILED"}, 1), f2p, p2p),
        "f2p_error": (run({f2p[0]: "ERROR"}, 1), f2p, p2p),
        "p2p_fails": (run({p2p[0]: "FAILED"}, 1), f2p, p2p),
        "f2p_skipped": (run({f2p[0]: "SKIPPED"}), f2p, p2p),
        "p2p_skipped": (run({p2p[0]: "SKIPPED"}), f2p, p2p),
        "f2p_xfail": (run({f2p[0]: "XFAIL"}), f2p, p2p),
        "f2p_missing": (log_of([line(repo, t, "PASSED") for t in p2p], code(0)), f2p, p2p),
        "segfault_at_exit": (run({}, 139, ["Segmentation fault (core dumped)"]), f2p, p2p),
        "nonzero_exit_all_pass": (run({}, 1), f2p, p2p),
        "no_markers": ("+ source /opt/miniconda3/bin/activate\nconda: command not found\n", f2p, p2p),
        "empty_between_markers": (log_of([], code(4)), f2p, p2p),
        "results_outside_markers": (log_of([], code(0), tail=[line(repo, t, "PASSED") for t in every]), f2p, p2p),
        "patch_apply_failed": (">>>>> Patch Apply Failed:\nerror: patch failed\n" + run({}), f2p, p2p),
        "tests_timed_out": (run({}) + ">>>>> Tests Timed Out\n", f2p, p2p),
        "crlf_log": (run({}).replace("\n", "\r\n"), f2p, p2p),
        "no_tests_listed": (run({}), [], []),
    }
    if style(repo) == "pytest":
        spaced = f2p[0] + "[a b]"
        truncated = "tests/test_fix.py::test_grammar[log(photon"
        cases |= {
            "old_style_lines": (run({}, old=True), f2p, p2p),
            "id_with_space_passed": (log_of([f"PASSED {spaced}", *[line(repo, t, "PASSED") for t in p2p]], code(0)),
                                     [spaced], p2p),
            "truncated_id": (log_of([f"PASSED {truncated}photon)]", *[line(repo, t, "PASSED") for t in p2p]], code(0)),
                             [truncated], p2p),
            "skip_summary_line": (run({}, extra=["SKIPPED [1] tests/test_keep.py:12: needs network"]),
                                  f2p, p2p + ["[1]"]),
            "failed_message_with_dash": (log_of([f"FAILED {f2p[0]} - assert a - b == c",
                                                 *[line(repo, t, 'PASSED') for t in p2p]], code(1)), f2p, p2p),
            "bare_status_line": (run({}, extra=["PASSED", "FAILED"]), f2p, p2p),
            "absolute_path_param": (log_of([f"PASSED tests/test_fix.py::test_path[/tmp/x/data.txt]",
                                            *[line(repo, t, "PASSED") for t in p2p]], code(0)),
                                    ["tests/test_fix.py::test_path[/data.txt]"], p2p),
            "colour_codes": (log_of([f"\x1b[32mPASSED\x1b[0m {t}" for t in every], code(0)), f2p, p2p),
            "mouse_button_param": (log_of([f"PASSED tests/test_fix.py::test_click[MouseButton.LEFT]",
                                           *[line(repo, t, "PASSED") for t in p2p]], code(0)),
                                   ["tests/test_fix.py::test_click[1]"], p2p),
        }
    return cases


def rows(versions: dict[str, list[str]]) -> list[dict[str, Any]]:
    """The Lite sample's rows plus one made-up row per other classic repository (its newest version)."""
    real = json.loads(DATA.read_text())
    made = []
    for index, repo in enumerate(MADE_UP_REPOS):
        owner, name = repo.split("/")
        made.append({"repo": repo, "instance_id": f"{owner}__{name}-{1000 + index}", "base_commit": f"{index:040x}",
                     "version": versions[repo][-1], "test_patch": TEST_PATCH.format(path="tests/test_fix.py"),
                     "patch": "", "problem_statement": "", "hints_text": "", "created_at": "",
                     "environment_setup_commit": f"{index:040x}", "FAIL_TO_PASS": [], "PASS_TO_PASS": []})
    return real + made


def cases(versions: dict[str, list[str]], fivex: bool) -> list[dict[str, Any]]:
    """Every scenario on every row; 5.x cases carry what a 5.x row has (eval_script, log_parser, ...)."""
    out = []
    for row in rows(versions):
        tag = row["instance_id"].split("-")[-1]
        f2p, p2p = tests_for(row["repo"], tag)
        for name, (log, fail_to_pass, pass_to_pass) in scenarios(row["repo"], f2p, p2p, fivex).items():
            case_row = {**row, "FAIL_TO_PASS": fail_to_pass, "PASS_TO_PASS": pass_to_pass}
            out.append({"id": f"{row['instance_id']}/{name}", "row": case_row, "log": log,
                        "prediction": {"instance_id": row["instance_id"], "model_name_or_path": "m",
                                       "model_patch": "diff --git a/x b/x\n"}})
    return out
