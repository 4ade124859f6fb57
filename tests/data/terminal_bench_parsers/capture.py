"""Make the parser parity data: real pytest output from several pytest versions, and the official verdicts.

How it was made (by hand, once; the outputs and verdicts are committed, the tests only read them):

    python3.11 -m venv /tmp/venv-pytest8.4 && /tmp/venv-pytest8.4/bin/pip install 'pytest==8.4.*'
    python3.11 -m venv /tmp/venv-pytest9.0 && /tmp/venv-pytest9.0/bin/pip install 'pytest==9.0.*'
    pip download terminal-bench==0.2.18 --no-deps --python-version 3.12 --only-binary=:all: -d /tmp/tbpkg
    python3.11 -m venv /tmp/venv-tb && /tmp/venv-tb/bin/pip install --no-deps --ignore-requires-python \
        /tmp/tbpkg/terminal_bench-0.2.18-py3-none-any.whl
    /tmp/venv-tb/bin/python tests/data/terminal_bench_parsers/capture.py /tmp/venv-pytest8.4 /tmp/venv-pytest9.0

terminal-bench needs Python 3.12 and a long list of SDKs, none of which its parsers use: the
parser modules are loaded from the installed package without running its __init__ (which imports
every agent). The official verdict is what Harness._parse_results and Harness._is_resolved make
of the parser's answer: a parse error is unresolved, otherwise resolved when every test passed.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import tempfile
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
HEADER = "=========================== short test summary info ============================"

TEST_FILES = {
    "mixed": {"test_outputs.py": '''
import pytest

def test_ok():
    pass

def test_bad():
    assert 1 - 2 == 3, "a - b"

@pytest.mark.skip(reason="not now")
def test_skipped():
    pass

@pytest.mark.xfail(reason="known bug")
def test_expected_failure():
    assert False

@pytest.mark.xfail(reason="fixed since")
def test_unexpected_pass():
    pass

@pytest.mark.parametrize("value", ["a b", "c - d"])
def test_param(value):
    assert value != "a b"

@pytest.fixture
def broken():
    raise RuntimeError("fixture failed")

def test_uses_broken_fixture(broken):
    pass

class TestGroup:
    def test_method(self):
        pass
'''},
    "all-pass": {"test_outputs.py": "def test_a():\n    pass\n\ndef test_b():\n    assert True\n"},
    "collection-error": {"test_outputs.py": "import numpy_that_is_not_installed\n\ndef test_a():\n    pass\n"},
    "teardown-error": {"test_outputs.py": '''
import pytest

@pytest.fixture
def resource():
    yield 1
    raise RuntimeError("teardown failed")

def test_uses_resource(resource):
    assert resource == 1
'''},
    "same-name-two-files": {"test_a.py": "def test_x():\n    assert False\n", "test_b.py": "def test_x():\n    pass\n"},
    # Fails on the first run, passes on the second: run-tests.sh that retries.
    "rerun-fail-then-pass": {"test_outputs.py": '''
import os

def test_flaky():
    marker = os.path.join(os.path.dirname(__file__), ".ran-once")
    if not os.path.exists(marker):
        open(marker, "w").close()
        assert False, "first run"
'''},
}
# How each case's run-tests.sh runs pytest: PYTEST is the venv's interpreter running pytest.
RUNS = {
    "mixed": ["{py} -m pytest -rA tests"],
    "all-pass": ["{py} -m pytest -rA tests"],
    "collection-error": ["{py} -m pytest -rA tests"],
    "teardown-error": ["{py} -m pytest -rA tests"],
    "same-name-two-files": ["{py} -m pytest -rA tests"],
    "rerun-fail-then-pass": ["{py} -m pytest -rA tests", "{py} -m pytest -rA tests"],
    "pass-then-error-line": ["{py} -m pytest -rA tests", "echo 'ERROR: could not upload the coverage report'"],
    "colour": ["{py} -m pytest -rA --color=yes tests"],
}
TEST_FILES["pass-then-error-line"] = TEST_FILES["all-pass"]
TEST_FILES["colour"] = TEST_FILES["mixed"]

# Output no pytest run gives on its own, each for one rule of the parsers.
SYNTHETIC = {
    "no-summary.pytest.txt": "collected 0 items\n\n=== no tests ran in 0.01s ===\n",
    "header-without-results.pytest.txt": f"{HEADER}\n=== 3 passed in 0.1s ===\n",
    "lines-before-the-header.pytest.txt": f"FAILED tests/a.py::test_y - x\n{HEADER}\nPASSED tests/a.py::test_x\n",
    "text-after-the-closing-line.pytest.txt": f"{HEADER}\nPASSED tests/a.py::test_x\n=== 1 passed ===\nFAILED tests/a.py::test_late\n",
    "status-with-colon.pytest.txt": f"{HEADER}\nPASSED: tests/a.py::test_x\nFAILED: tests/a.py::test_y\n",
    "unknown-words.pytest.txt": f"{HEADER}\nRESULT tests/a.py::test_y\nUNKNOWN tests/a.py::test_z\nPASSED\nPASSED tests/a.py::\n",
    "skipped-location.pytest.txt": f"{HEADER}\nSKIPPED [2] tests/a.py:12: needs a GPU\nPASSED tests/a.py::test_y\n",
    "failed-message-with-dashes.pytest.txt": f"{HEADER}\nFAILED tests/a.py::test_x[a - b] - assert 1 - 2\n",
    "error-message-kept.pytest.txt": f"{HEADER}\nERROR tests/a.py - ImportError: x\nPASSED tests/a.py::test_y\n",
    "lowercase-header.pytest.txt": "==== Short Test Summary Info ====\nPASSED tests/a.py::test_x\n",
    "header-mid-line.pytest.txt": f"log: {HEADER} trailing\nFAILED tests/a.py::test_x\n",
    "pass-then-fail-same-test.pytest.txt": f"{HEADER}\nPASSED tests/a.py::test_x\n{HEADER}\nFAILED tests/a.py::test_x - no\n",
    "crlf.pytest.txt": f"{HEADER}\r\nPASSED tests/a.py::test_x\r\nFAILED tests/a.py::test_y - e\r\n",
    "swebench-passed.swebench.txt": "noise\nSWEBench results starts here\nPASSED\nSWEBench results ends here\n",
    "swebench-failed.swebench.txt": "SWEBench results starts here\nFAILED\nSWEBench results ends here\n",
    "swebench-no-markers.swebench.txt": "PASSED\n",
    "swebench-two-blocks.swebench.txt": ("SWEBench results starts here\nFAILED\nSWEBench results ends here\n"
                                         "SWEBench results starts here\nPASSED\nSWEBench results ends here\n"),
    "sweperf-passed.sweperf.txt": "SWE-Perf results starts here\n  PASSED  \nSWE-Perf results ends here\n",
    "sweperf-no-end.sweperf.txt": "SWE-Perf results starts here\nPASSED\n",
    "mlebench-passed.mlebench.txt": "MLEBench results starts here\nALL TESTS PASSED\nMLEBench results ends here\n",
    "mlebench-no-markers.mlebench.txt": "ALL TESTS PASSED\n",
    "mlebench-failed.mlebench.txt": "MLEBench results starts here\n2 TESTS FAILED\nMLEBench results ends here\n",
    "swelancer-success.swelancer.txt": "... SWE Lancer Success ...\n",
    "swelancer-both.swelancer.txt": "swe lancer failure then swe lancer success\n",
    "swelancer-failure.swelancer.txt": "swe lancer failure\nuser_tool completed\n",
    "swelancer-user-tool.swelancer.txt": "User_Tool run Completed\n",
    "swelancer-nothing.swelancer.txt": "nothing\n",
}


def official_parsers(site: Path) -> dict[str, object]:
    """The official parser classes, loaded without terminal_bench/__init__.py."""
    root = site / "terminal_bench"
    for name in ("terminal_bench", "terminal_bench.utils", "terminal_bench.parsers"):
        module = types.ModuleType(name)
        module.__path__ = [str(root / Path(*name.split(".")[1:]))]
        sys.modules[name] = module
    loaded = {}
    for name in ("utils.logger", "parsers.base_parser", "parsers.pytest_parser", "parsers.swebench_parser",
                 "parsers.sweperf_parser", "parsers.mlebench_parser", "parsers.swelancer_parser",
                 "parsers.parser_factory"):
        full = f"terminal_bench.{name}"
        spec = importlib.util.spec_from_file_location(full, root / (name.replace(".", "/") + ".py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[full] = module
        spec.loader.exec_module(module)
        loaded[name] = module
    factory = loaded["parsers.parser_factory"]
    return {member.value: factory.ParserFactory.get_parser(member) for member in factory.ParserName}


ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def official_verdict(parser: object, content: str) -> dict[str, object]:
    content = ANSI.sub("", content)  # the harness parses a tmux pane capture, which holds no colour codes
    try:
        results = parser.parse(content)
    except Exception as exc:  # the harness records PARSE_ERROR: unresolved
        return {"results": None, "resolved": False, "error": type(exc).__name__}
    return {"results": {k: v.value for k, v in results.items()}, "resolved": all(v.value == "passed" for v in results.values()),
            "error": None}


def run_case(case: str, venv: Path) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        tests = Path(tmp) / "tests"
        tests.mkdir()
        for name, text in TEST_FILES[case].items():
            (tests / name).write_text(text)
        py = venv / "bin" / "python"
        script = "\n".join(line.format(py=py) for line in RUNS[case]) + "\n"
        done = subprocess.run(["bash", "-c", script], cwd=tmp, capture_output=True, text=True,
                              env={"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1", "COLUMNS": "160"})
        return done.stdout + done.stderr


def main(venvs: list[Path]) -> None:
    site = Path(next(p for p in sys.path if p.endswith("site-packages")))
    parsers = official_parsers(site)
    out = HERE / "outputs"
    out.mkdir(exist_ok=True)
    verdicts = {}
    for venv in venvs:
        version = subprocess.run([venv / "bin" / "python", "-c", "import pytest; print(pytest.__version__)"],
                                 capture_output=True, text=True, check=True).stdout.strip()
        for case in RUNS:
            name = f"{case}__pytest-{version}.pytest.txt"
            (out / name).write_text(run_case(case, venv))
    for name, text in SYNTHETIC.items():
        (out / name).write_text(text, newline="")
    for path in sorted(out.iterdir()):
        parser_name = path.name.rsplit(".", 2)[-2]
        verdicts[path.name] = {"parser": parser_name,
                               **official_verdict(parsers[parser_name], open(path, newline="").read())}
    (HERE / "official_verdicts.json").write_text(json.dumps(verdicts, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main([Path(v) for v in sys.argv[1:]])
