"""Terminal-Bench: the v1 task format with pytest -rA grading, and Terminal-Bench 2 from a git source."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agentcompass.errors import UserError
from agentcompass.formats.terminal_bench import TerminalBenchFormat, grade_tests, parse_pytest_summary
from agentcompass.schema import Recipe

DATA = Path(__file__).resolve().parent / "data"
TB1 = DATA / "terminal_bench"
TB2 = DATA / "terminal_bench_2"


def host_overlay(tmp_path: Path) -> Path:
    """--config overlay that lets the fixture tasks run on the host: pytest from this interpreter."""
    path = tmp_path / "host.yaml"
    path.write_text(f"benchmark:\n  runs_on_host: true\n  env: {{PYTHON: {sys.executable}}}\n")
    return path


def trials(run_dir: Path) -> dict[str, dict]:
    rows = [json.loads(line) for line in (run_dir / "trials.jsonl").read_text().splitlines()]
    return {row["task_id"]: row for row in rows}


# -- the pytest -rA parser -----------------------------------------------------------------
REAL_TESTS = '''
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
'''
# What pytest reports for REAL_TESTS, by the design of each test above.
REAL_EXPECTED = {
    "tests/test_outputs.py::test_ok": "passed",
    "tests/test_outputs.py::test_bad": "failed",
    "tests/test_outputs.py:10": "skipped",
    "tests/test_outputs.py::test_expected_failure": "xfail",
    "tests/test_outputs.py::test_unexpected_pass": "xpass",
    "tests/test_outputs.py::test_param[a b]": "failed",
    "tests/test_outputs.py::test_param[c - d]": "passed",
    "tests/test_outputs.py::test_uses_broken_fixture": "error",
    "tests/test_outputs.py::TestGroup::test_method": "passed",
}


@pytest.mark.parametrize("color", ["no", "yes"])
def test_parser_reads_real_pytest_output(tmp_path: Path, color: str) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_outputs.py").write_text(REAL_TESTS)
    done = subprocess.run([sys.executable, "-m", "pytest", "-rA", f"--color={color}", "-p", "no:cacheprovider",
                           "tests/test_outputs.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout[-2000:]
    assert parse_pytest_summary(done.stdout) == REAL_EXPECTED
    grade = grade_tests(parse_pytest_summary(done.stdout), done.returncode)
    assert not grade.passed and "test_bad" in grade.message and "test_unexpected_pass" in grade.message


HEADER = "=========================== short test summary info ============================"
TRICKY = [
    pytest.param("collected 0 items\n\n=== no tests ran in 0.01s ===\n", {}, id="no-summary-section"),
    pytest.param(f"PASSED tests/a.py::test_x\n{HEADER}\nFAILED tests/a.py::test_x - boom\n=== 1 failed ===\n",
                 {"tests/a.py::test_x": "failed"}, id="lines-before-the-header-are-captured-output"),
    pytest.param(f"{HEADER}\nPASSED tests/a.py::test_x\n=== 1 passed in 0.1s ===\nPASSED tests/a.py::test_fake\n",
                 {"tests/a.py::test_x": "passed"}, id="text-after-the-closing-line-is-ignored"),
    pytest.param(f"{HEADER}\r\nPASSED tests/a.py::test_x\r\n=== 1 passed ===\r\n",
                 {"tests/a.py::test_x": "passed"}, id="crlf-from-a-terminal"),
    pytest.param(f"\x1b[36m{HEADER}\x1b[0m\n\x1b[32mPASSED\x1b[0m tests/a.py::\x1b[1mtest_x\x1b[0m\n",
                 {"tests/a.py::test_x": "passed"}, id="ansi-colours"),
    pytest.param(f"{HEADER}\nERROR tests/test_outputs.py - ModuleNotFoundError: No module named 'numpy'\n",
                 {"tests/test_outputs.py": "error"}, id="collection-error"),
    pytest.param(f"{HEADER}\nFAILED tests/a.py::test_x - AssertionError: assert 'abc...\n",
                 {"tests/a.py::test_x": "failed"}, id="truncated-message"),
    pytest.param(f"{HEADER}\nSKIPPED [2] tests/a.py:12: needs a GPU\nPASSED tests/a.py::test_y\n",
                 {"tests/a.py:12": "skipped", "tests/a.py::test_y": "passed"}, id="skipped-location"),
    pytest.param(f"{HEADER}\nFAILED tests/a.py::test_x - first\n  continued message line\n=== 1 failed ===\n",
                 {"tests/a.py::test_x": "failed"}, id="wrapped-message-line"),
    pytest.param(f"{HEADER}\nPASSED tests/a.py::test_x\n=== 1 passed ===\n{HEADER}\nFAILED tests/a.py::test_x - x\n",
                 {"tests/a.py::test_x": "failed"}, id="second-run-fails-a-passed-test"),
    pytest.param(f"{HEADER}\nFAILED tests/a.py::test_x - x\n=== 1 failed ===\n{HEADER}\nPASSED tests/a.py::test_x\n",
                 {"tests/a.py::test_x": "failed"}, id="a-failure-is-not-undone-by-a-later-pass"),
    pytest.param(f"{HEADER}\nPASSED: tests/a.py::test_x\nRESULT tests/a.py::test_y\n", {}, id="not-result-lines"),
]


@pytest.mark.parametrize(("output", "expected"), TRICKY)
def test_parser_tricky_lines(output: str, expected: dict[str, str]) -> None:
    assert parse_pytest_summary(output) == expected


@pytest.mark.parametrize(("tests", "passed"), [
    ({}, False),
    ({"a::t1": "passed", "a::t2": "xfail", "a.py:3": "skipped"}, True),
    ({"a::t1": "passed", "a::t2": "xpass"}, False),
    ({"a::t1": "passed", "a": "error"}, False),
])
def test_resolved_only_when_every_parsed_test_passed(tests: dict[str, str], passed: bool) -> None:
    assert grade_tests(tests, 0).passed is passed


# -- loading task directories --------------------------------------------------------------
def recipe_for(path: Path, **extra: object) -> Recipe:
    return Recipe(name="tb", format="terminal_bench", source={"path": str(path)}, **extra)


def test_loads_the_fixture_tasks_from_compose_and_dockerfile() -> None:
    tasks = {t.id: t for t in TerminalBenchFormat(recipe_for(TB1)).load()}
    assert sorted(tasks) == ["count-lines", "greeting-file"]
    greeting = tasks["greeting-file"]
    assert greeting.instruction.startswith("Write the value of the environment variable GREETING")
    assert greeting.build_context == TB1 / "greeting-file" and greeting.image is None
    assert greeting.env == {"TEST_DIR": "/tests", "GREETING": "hello"}  # compose env, ${T_BENCH_TEST_DIR} filled in
    assert (greeting.workdir, greeting.agent_timeout_s, greeting.verify_timeout_s) == ("/app", 120, 60)
    counting = tasks["count-lines"]
    assert counting.workdir == "/app"  # from the Dockerfile's WORKDIR
    assert counting.data["solution_commands"] == ["cd /app", "wc -l < data.txt > count.txt"]


def write_task(root: Path, name: str, compose: str | None = None, dockerfile: str | None = "FROM x\n",
               task_yaml: str = "instruction: do it\n") -> Path:
    task = root / name
    task.mkdir(parents=True)
    (task / "task.yaml").write_text(task_yaml)
    if dockerfile is not None:
        (task / "Dockerfile").write_text(dockerfile)
    if compose is not None:
        (task / "docker-compose.yaml").write_text(textwrap.dedent(compose))
    return task


def test_compose_details_and_defaults(tmp_path: Path) -> None:
    write_task(tmp_path, "dict-env", compose="""
        services:
          client:
            build: .
            working_dir: /srv/work
            environment: {A: "1", LOGS: "${T_BENCH_CONTAINER_LOGS_PATH}/x", UNKNOWN: "${SOMETHING_ELSE}"}
        """, task_yaml="descriptions:\n  - key: base\n    description: the early format\n")
    write_task(tmp_path, "image-only", dockerfile=None, compose="services:\n  client:\n    image: python:3.12\n")
    write_task(tmp_path, "list-env", compose="services:\n  client:\n    build: .\n    environment: [FROM_HOST, B=x=y]\n")
    tasks = {t.id: t for t in TerminalBenchFormat(recipe_for(tmp_path)).load()}
    dict_env = tasks["dict-env"]
    assert dict_env.env == {"TEST_DIR": "/tests", "A": "1", "LOGS": "/logs/x"}
    assert dict_env.workdir == "/srv/work" and dict_env.instruction == "the early format"
    assert (dict_env.agent_timeout_s, dict_env.verify_timeout_s) == (360.0, 60.0)  # the original's defaults
    assert tasks["image-only"].image == "python:3.12" and tasks["image-only"].build_context is None
    assert tasks["list-env"].env == {"TEST_DIR": "/tests", "B": "x=y"}  # a bare name means "from the host": not ours


@pytest.mark.parametrize(("compose", "dockerfile", "message"), [
    ("services:\n  client: {build: .}\n  db: {image: postgres}\n", "FROM x\n", "only a single client service"),
    ("services:\n  client:\n    build: {context: ., dockerfile: Dockerfile.dev}\n", "FROM x\n", "named Dockerfile"),
    (None, None, "neither a Dockerfile nor a docker-compose.yaml"),
    ("services: [oops\n", "FROM x\n", "not valid YAML"),
])
def test_unsupported_task_dirs_are_user_errors(tmp_path: Path, compose: str | None, dockerfile: str | None,
                                                message: str) -> None:
    write_task(tmp_path, "odd-task", compose=compose, dockerfile=dockerfile)
    with pytest.raises(UserError, match=message):
        TerminalBenchFormat(recipe_for(tmp_path)).load()


def test_a_task_left_out_of_the_selection_is_never_read(tmp_path: Path) -> None:
    write_task(tmp_path, "good")
    write_task(tmp_path, "multi-service", compose="services:\n  a: {build: .}\n  b: {build: .}\n")
    tasks = TerminalBenchFormat(recipe_for(tmp_path, params={"sample_ids": ["good"]})).load()
    assert [t.id for t in tasks] == ["good"]


# -- runs on the host (local provider) -----------------------------------------------------
def test_terminal_bench_oracle_and_nop_on_local(cli, tmp_path: Path) -> None:
    params = json.dumps({"path": str(TB1), "sample_ids": ["greeting-file"]})
    for harness, status in (("oracle", "passed"), ("nop", "failed")):
        done = cli("run", "terminal_bench", harness, "none", "--config", str(host_overlay(tmp_path)),
                   "--benchmark-params", params, "--results-dir", str(tmp_path), "--run-name", "r")
        assert done.returncode == 0, done.stderr
        row = trials(tmp_path / "r" / f"terminal_bench__{harness}__none__local")["greeting-file"]
        assert row["status"] == status, row
        outcomes = set(row["details"]["tests"].values())
        assert outcomes == ({"passed"} if status == "passed" else {"failed"})
        assert {t.rsplit("::", 1)[1] for t in row["details"]["tests"]} == {"test_file_exists", "test_file_content"}


# -- Terminal-Bench 2 from a git repository ------------------------------------------------
def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def tb2_repo(tmp_path: Path) -> Path:
    """A real git repository holding the TB2 fixture under tasks/, tagged v1, then changed on main."""
    repo = tmp_path / "tb2-repo"
    shutil.copytree(TB2, repo / "tasks")
    git("init", "-q", "-b", "main", cwd=repo)
    git("-c", "user.name=t", "-c", "user.email=t@example.com", "add", ".", cwd=repo)
    git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "tasks", cwd=repo)
    git("tag", "v1", cwd=repo)
    # After the tag, main breaks the solution: checking out v1 must not see this.
    (repo / "tasks" / "sum-numbers" / "solution" / "solve.sh").write_text("#!/bin/bash\necho 'print(0)' > /app/sum.py\n")
    git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qam", "break", cwd=repo)
    return repo


def git_overlay(tmp_path: Path, url: str, ref: str) -> Path:
    path = tmp_path / "git-source.yaml"
    path.write_text(f"benchmark:\n  runs_on_host: true\n  env: {{PYTHON: {sys.executable}}}\n"
                    f"  source: {{git: '{url}', ref: {ref}, subdir: tasks}}\n")
    return path


def test_terminal_bench_2_from_a_git_url_is_cloned_once_and_reused(cli, tmp_path: Path, tb2_repo: Path) -> None:
    cache = tmp_path / "cache"
    env = {"AGENTCOMPASS_CACHE_DIR": str(cache)}
    overlay = git_overlay(tmp_path, f"file://{tb2_repo}", "v1")
    done = cli("run", "terminal_bench_2", "oracle", "none", "--config", str(overlay),
               "--results-dir", str(tmp_path / "res"), "--run-name", "first", env=env)
    assert done.returncode == 0, done.stderr
    assert trials(tmp_path / "res" / "first" / "terminal_bench_2__oracle__none__local")["sum-numbers"]["status"] == "passed"
    checkouts = list((cache / "datasets").iterdir())
    assert len(checkouts) == 1 and git("rev-parse", "HEAD", cwd=checkouts[0]) == git("rev-parse", "v1", cwd=tb2_repo)
    shutil.rmtree(tb2_repo)  # the second run must come from the cache
    done = cli("run", "terminal_bench_2", "nop", "none", "--config", str(overlay),
               "--results-dir", str(tmp_path / "res"), "--run-name", "second", env=env)
    assert done.returncode == 0, done.stderr
    assert trials(tmp_path / "res" / "second" / "terminal_bench_2__nop__none__local")["sum-numbers"]["status"] == "failed"


def test_the_ref_selects_the_commit(cli, tmp_path: Path, tb2_repo: Path) -> None:
    overlay = git_overlay(tmp_path, str(tb2_repo), "main")  # a plain path works as a URL too
    done = cli("run", "terminal_bench_2", "oracle", "none", "--config", str(overlay),
               "--results-dir", str(tmp_path / "res"), "--run-name", "main",
               env={"AGENTCOMPASS_CACHE_DIR": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr
    assert trials(tmp_path / "res" / "main" / "terminal_bench_2__oracle__none__local")["sum-numbers"]["status"] == "failed"


@pytest.mark.parametrize(("url", "ref", "message"), [
    ("file:///nonexistent/agentcompass-repo", "v1", "cannot clone git source file:///nonexistent/agentcompass-repo"),
    (None, "no-such-tag", "cannot check out ref 'no-such-tag'"),
])
def test_a_bad_git_source_is_a_one_line_user_error(cli, tmp_path: Path, tb2_repo: Path, url: str | None,
                                                    ref: str, message: str) -> None:
    cache = tmp_path / "cache"
    overlay = git_overlay(tmp_path, url or f"file://{tb2_repo}", ref)
    done = cli("run", "terminal_bench_2", "oracle", "none", "--config", str(overlay),
               "--results-dir", str(tmp_path / "res"), env={"AGENTCOMPASS_CACHE_DIR": str(cache)})
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and message in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "res").exists()
    assert not any((cache / "datasets").iterdir())  # no half-made checkout left to be "reused"


# -- real containers -----------------------------------------------------------------------
@pytest.mark.docker
def test_terminal_bench_on_docker_grades_both_fixture_tasks(cli, base_image: str, tmp_path: Path) -> None:
    for harness, status in (("oracle", "passed"), ("nop", "failed")):
        done = cli("run", "terminal_bench", harness, "none", "--env", "docker",
                   "--benchmark-params", json.dumps({"path": str(TB1)}),
                   "--results-dir", str(tmp_path), "--run-name", "d", timeout=900)
        assert done.returncode == 0, done.stderr
        rows = trials(tmp_path / "d" / f"terminal_bench__{harness}__none__docker")
        assert {k: r["status"] for k, r in rows.items()} == {"greeting-file": status, "count-lines": status}, rows
    # solution.yaml ran its commands in one shell: `cd /app` carried over to the next command.
    counted = rows["count-lines"]["details"]["tests"]
    assert set(counted) == {"../tests/check_outputs.py::test_count", "../tests/check_outputs.py::test_data_unchanged"}
    assert counted["../tests/check_outputs.py::test_data_unchanged"] == "passed"  # nop leaves the image's data intact


@pytest.mark.docker
def test_terminal_bench_2_on_docker(cli, base_image: str, tmp_path: Path) -> None:
    for harness, status in (("oracle", "passed"), ("nop", "failed")):
        done = cli("run", "terminal_bench_2", harness, "none", "--env", "docker",
                   "--benchmark-params", json.dumps({"path": str(TB2)}),
                   "--results-dir", str(tmp_path), "--run-name", "d", timeout=900)
        assert done.returncode == 0, done.stderr
        row = trials(tmp_path / "d" / f"terminal_bench_2__{harness}__none__docker")["sum-numbers"]
        assert row["status"] == status, row
