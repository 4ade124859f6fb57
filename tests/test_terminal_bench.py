"""Terminal-Bench's task format: pytest output read as the official PytestParser reads it, and task directories loaded
(compose, Dockerfile, solution.yaml, tmux keys)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

from agentcompass.core.errors import UserError, VerifierError
from agentcompass.formats.terminal_bench.format import TerminalBenchFormat, grade_tests, solution_keystrokes
from agentcompass.formats.terminal_bench.compose import interpolate
from agentcompass.formats.terminal_bench.parsers import parse_test_output
from agentcompass.formats.terminal_bench.tmux import Keystrokes, blocking_keys
from agentcompass.core.schema import Recipe
from terminal_bench_tasks import DATA, TB1, write_task


# -- pytest output, read as the official PytestParser reads it (more cases: test_terminal_bench_parsers.py) ----
def capture_module() -> types.ModuleType:
    """tests/data/terminal_bench_parsers/capture.py, which holds the test files the parity data was made from."""
    spec = importlib.util.spec_from_file_location("capture", DATA / "terminal_bench_parsers" / "capture.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# What the official parser makes of pytest's report on the `mixed` test file: the name after the first `::`,
# a FAILED line's last ` - message` cut off, other lines kept whole.
REAL_EXPECTED = {
    "test_ok": "passed",
    "test_bad - AssertionError: a": "failed",
    "[1] tests/test_outputs.py:10: not now": "skipped",
    "test_expected_failure - known bug": "xfail",
    "test_unexpected_pass - fixed since": "xpass",
    "test_param[a b]": "failed",
    "test_param[c - d]": "passed",
    "test_uses_broken_fixture - RuntimeError: fixture failed": "error",
    "TestGroup::test_method": "passed",
}


@pytest.mark.parametrize("color", ["no", "yes"])
def test_parser_reads_real_pytest_output(tmp_path: Path, color: str) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_outputs.py").write_text(capture_module().TEST_FILES["mixed"]["test_outputs.py"])
    done = subprocess.run([sys.executable, "-m", "pytest", "-rA", f"--color={color}", "-p", "no:cacheprovider",
                           "tests/test_outputs.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "160"})
    assert done.returncode == 1, done.stdout[-2000:]
    tests = parse_test_output("pytest", done.stdout)
    assert tests == REAL_EXPECTED
    grade = grade_tests(tests, done.returncode)
    assert not grade.passed and "test_bad" in grade.message and "test_unexpected_pass" in grade.message


@pytest.mark.parametrize(("tests", "passed"), [
    ({}, True),  # a summary header with no result lines: resolved, as officially
    ({"t1": "passed", "t2": "xfail", "a.py:3": "skipped"}, True),
    ({"t1": "passed", "t2": "xpass"}, False),
    ({"t1": "passed", "a": "error"}, False),
])
def test_resolved_when_every_parsed_test_passed(tests: dict[str, str], passed: bool) -> None:
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
    assert greeting.data["parser"] == "pytest" and greeting.data["same_shell"] is False
    counting = tasks["count-lines"]
    assert counting.workdir == ""  # no compose working_dir: the image's own WorkingDir, asked of the provider
    assert counting.env == {"TEST_DIR": "/tests"}  # what the usual compose template gives a Dockerfile-only task
    on_host = TerminalBenchFormat(recipe_for(TB1, runs_on_host=True)).load()
    assert {t.id: t.workdir for t in on_host} == {"count-lines": "/app", "greeting-file": "/app"}  # Dockerfile's WORKDIR


def test_compose_details_and_defaults(tmp_path: Path) -> None:
    write_task(tmp_path, "dict-env", compose="""
        services:
          client:
            build: .
            working_dir: /srv/work
            environment:
              A: "1"
              LOGS: "${T_BENCH_CONTAINER_LOGS_PATH}/x"
              UNSET: "${SOMETHING_ELSE}"
              DEFAULTED: "${SOMETHING_ELSE:-fallback}"
              BARE: "$T_BENCH_TEST_DIR/y"
              DOLLARS: "$$HOME"
        """, task_yaml="descriptions:\n  - key: base\n    description: the early format\nparser_name: swebench\n")
    write_task(tmp_path, "image-only", dockerfile=None, compose="services:\n  client:\n    image: python:3.12\n")
    write_task(tmp_path, "list-env", compose="services:\n  client:\n    build: .\n    environment: [FROM_HOST, B=x=y]\n")
    tasks = {t.id: t for t in TerminalBenchFormat(recipe_for(tmp_path)).load()}
    dict_env = tasks["dict-env"]
    assert dict_env.env == {"A": "1", "LOGS": "/logs/x", "UNSET": "", "DEFAULTED": "fallback", "BARE": "/tests/y",
                            "DOLLARS": "$HOME"}
    assert dict_env.workdir == "/srv/work" and dict_env.instruction == "the early format"
    assert dict_env.data["parser"] == "swebench"
    assert (dict_env.agent_timeout_s, dict_env.verify_timeout_s) == (360.0, 60.0)  # the original's defaults
    assert tasks["image-only"].image == "python:3.12" and tasks["image-only"].build_context is None
    assert tasks["list-env"].env == {"B": "x=y"}  # a bare name means "from the host": not ours


def test_compose_services_are_read_with_their_container_details(tmp_path: Path) -> None:
    write_task(tmp_path, "multi", compose="""
        services:
          client:
            build: {context: ., dockerfile: Dockerfile, args: [MODE=fast]}
            command: sleep infinity
            user: "1000:1000"
            tmpfs: /scratch:size=64m
            volumes: ["${T_BENCH_TASK_LOGS_PATH}:${T_BENCH_CONTAINER_LOGS_PATH}", "data:/data", "./local:/local"]
            deploy: {resources: {limits: {cpus: "1.5", memory: 2G}}}
            cap_add: [SYS_PTRACE]
          db:
            image: postgres:16
            entrypoint: ["docker-entrypoint.sh"]
            mem_limit: 512m
            privileged: true
            network_mode: host
            healthcheck: {test: "pg_isready", interval: 1m30s, timeout: 500ms, retries: 3}
        """)
    task = TerminalBenchFormat(recipe_for(tmp_path)).load()[0]
    client, (db,) = task.compose.client, task.compose.services
    assert (client.command, client.user, client.tmpfs, client.build_args) == (
        ["sleep", "infinity"], "1000:1000", {"/scratch": "size=64m"}, {"MODE": "fast"})
    assert client.volumes == {"/logs": "", "/data": "data", "/local": ""}
    assert (task.cpus, task.memory_mb, client.cap_add) == (1.5, 2048, ["SYS_PTRACE"])
    assert (db.image, db.entrypoint, db.memory_mb, db.privileged, db.network_mode) == (
        "postgres:16", ["docker-entrypoint.sh"], 512, True, "host")
    assert db.healthcheck == {"test": ["CMD-SHELL", "pg_isready"], "interval": 90_000_000_000,
                              "timeout": 500_000_000, "retries": 3}
    fixtures = {t.id: t for t in TerminalBenchFormat(recipe_for(TB1)).load()}
    assert fixtures["count-lines"].compose is None  # a bare Dockerfile: no compose


def test_services_start_after_those_they_depend_on(tmp_path: Path) -> None:
    write_task(tmp_path, "ordered", compose="""
        services:
          client: {build: ., depends_on: [api]}
          api: {image: x, depends_on: {db: {condition: service_healthy}, cache: {condition: service_started}}}
          db: {image: x}
          cache: {image: x}
        """)
    task = TerminalBenchFormat(recipe_for(tmp_path)).load()[0]
    assert [s.name for s in task.compose.services] == ["db", "cache", "api"]

@pytest.mark.parametrize(("value", "variables", "expected"), [
    ("${A:-d}", {}, "d"), ("${A:-d}", {"A": ""}, "d"), ("${A-d}", {"A": ""}, ""), ("${A:-d}", {"A": "v"}, "v"),
    ("${A:+alt}", {"A": "v"}, "alt"), ("${A:+alt}", {}, ""), ("${A+alt}", {"A": ""}, "alt"),
    ("$A/$B", {"A": "x"}, "x/"), ("$$A", {"A": "x"}, "$A"), ("${A:-${B}}", {"B": "nested"}, "nested"),
])
def test_compose_interpolation(value: str, variables: dict[str, str], expected: str) -> None:
    assert interpolate(value, variables) == expected


@pytest.mark.parametrize(("compose", "dockerfile", "task_yaml", "message"), [
    ("services:\n  client:\n    build: {context: ., dockerfile: Dockerfile.dev}\n", "FROM x\n", None, "Dockerfile.dev"),
    ("services:\n  server: {image: x}\n", "FROM x\n", None, "no `client` service"),
    (None, None, None, "neither a Dockerfile nor a docker-compose.yaml"),
    ("services: [oops\n", "FROM x\n", None, "not valid YAML"),
    ("services:\n  client:\n    image: ${IMAGE:?set IMAGE}\n", None, None, "IMAGE is required: set IMAGE"),
    (None, "FROM x\n", "instruction: x\nparser_name: junit\n", "parser_name 'junit' is not one of pytest, swebench"),
])
def test_unsupported_task_dirs_are_user_errors(tmp_path: Path, compose: str | None, dockerfile: str | None,
                                                task_yaml: str | None, message: str) -> None:
    write_task(tmp_path, "odd-task", compose=compose, dockerfile=dockerfile, task_yaml=task_yaml or "instruction: x\n")
    with pytest.raises(UserError, match=re.escape(message)):
        TerminalBenchFormat(recipe_for(tmp_path)).load()


def test_a_task_left_out_of_the_selection_is_never_read(tmp_path: Path) -> None:
    write_task(tmp_path, "good")
    write_task(tmp_path, "broken", compose="services: [oops\n")
    tasks = TerminalBenchFormat(recipe_for(tmp_path, params={"sample_ids": ["good"]})).load()
    assert [t.id for t in tasks] == ["good"]


def test_a_malformed_solution_yaml_fails_only_the_oracle(tmp_path: Path) -> None:
    """A non-string command used to stop loading for every harness; now only the oracle's trial fails."""
    write_task(tmp_path, "bad-solution", files={"solution.yaml": "- command: 42\n"})
    task = TerminalBenchFormat(recipe_for(tmp_path)).load()[0]
    with pytest.raises(VerifierError, match="solution.yaml: expected a command string"):
        TerminalBenchFormat(recipe_for(tmp_path)).solve(task, sandbox=None, trial=None)  # type: ignore[arg-type]


def test_solution_yaml_entries_keep_the_official_fields(tmp_path: Path) -> None:
    path = tmp_path / "solution.yaml"
    path.write_text("- echo hi\n- {command: C-c, append_enter: false, min_timeout_sec: 0.5}\n"
                    "- {command: make, block: true, max_timeout_sec: 600}\n")
    assert solution_keystrokes(path) == [
        Keystrokes("echo hi"), Keystrokes("C-c", append_enter=False, min_timeout_sec=0.5),
        Keystrokes("make", block=True, max_timeout_sec=600)]


@pytest.mark.parametrize(("keys", "sent"), [
    (["ls", "Enter"], ["ls", "; tmux wait -S done", "Enter"]),
    (["ls\n"], ["ls", "; tmux wait -S done", "Enter"]),
    (["ls", "C-m", "Enter"], ["ls", "; tmux wait -S done", "Enter"]),
])
def test_blocking_keys_end_with_the_official_wait(keys: list[str], sent: list[str]) -> None:
    assert blocking_keys(keys) == sent
