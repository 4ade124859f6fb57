"""Terminal-Bench: the v1 task format with pytest -rA grading, and Terminal-Bench 2 from a git source.

Longer than 400 lines because its module fixtures (built task images, a TB2 git source) are shared by every case; split with them next.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import types
import uuid
from pathlib import Path

import pytest

from agentcompass.core.errors import UserError, VerifierError
from agentcompass.formats.terminal_bench.format import TerminalBenchFormat, grade_tests, solution_keystrokes
from agentcompass.formats.terminal_bench.compose import interpolate
from agentcompass.formats.terminal_bench.parsers import parse_test_output
from agentcompass.formats.terminal_bench.tmux import Keystrokes, blocking_keys
from agentcompass.core.schema import Recipe

DATA = Path(__file__).resolve().parent / "data"
TB1 = DATA / "terminal_bench"
TB2 = DATA / "terminal_bench_2"
HEADER_LINE = "=========================== short test summary info ============================"


def host_overlay(tmp_path: Path) -> Path:
    """--config overlay that lets the fixture tasks run on the host: pytest from this interpreter."""
    path = tmp_path / "host.yaml"
    path.write_text(f"benchmark:\n  runs_on_host: true\n  env: {{PYTHON: {sys.executable}}}\n")
    return path


def trials(run_dir: Path) -> dict[str, dict]:
    rows = [json.loads(line) for line in (run_dir / "trials.jsonl").read_text().splitlines()]
    return {row["task_id"]: row for row in rows}


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


def write_task(root: Path, name: str, compose: str | None = None, dockerfile: str | None = "FROM x\n",
               task_yaml: str = "instruction: do it\n", files: dict[str, str] | None = None) -> Path:
    task = root / name
    task.mkdir(parents=True)
    (task / "task.yaml").write_text(task_yaml)
    if dockerfile is not None:
        (task / "Dockerfile").write_text(dockerfile)
    if compose is not None:
        (task / "docker-compose.yaml").write_text(textwrap.dedent(compose))
    for rel, text in (files or {}).items():
        (task / rel).parent.mkdir(parents=True, exist_ok=True)
        (task / rel).write_text(textwrap.dedent(text))
    return task


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
        # The official names: after the first `::`, a failure's last ` - message` cut off.
        assert {t.split(" - ")[0] for t in row["details"]["tests"]} == {"test_file_exists", "test_file_content"}


SWEBENCH_RUN_TESTS = """#!/bin/bash
echo "SWEBench results starts here"
if [ -f /app/fixed ]; then echo PASSED; else echo FAILED; fi
echo "SWEBench results ends here"
"""


def run_host(cli, tmp_path: Path, dataset: Path, harness: str, *extra: str, env: dict[str, str] | None = None) -> dict:
    run_name = f"{harness}-{len(list(tmp_path.glob('res/*')))}"
    done = cli("run", "terminal_bench", harness, "none", "--config", str(host_overlay(tmp_path)),
               "--benchmark-params", json.dumps({"path": str(dataset)}), "--results-dir", str(tmp_path / "res"),
               "--run-name", run_name, *extra, env=env)
    assert done.returncode == 0, done.stderr
    return trials(next((tmp_path / "res" / run_name).iterdir()))


def test_parser_name_swebench_grades_by_its_markers(cli, tmp_path: Path) -> None:
    dataset = tmp_path / "data"
    write_task(dataset, "swe-task", dockerfile="FROM x\nWORKDIR /app\n",
               task_yaml="instruction: fix it\nparser_name: swebench\n",
               files={"run-tests.sh": SWEBENCH_RUN_TESTS, "solution.sh": "touch /app/fixed\n"})
    assert run_host(cli, tmp_path, dataset, "oracle")["swe-task"]["status"] == "passed"
    row = run_host(cli, tmp_path, dataset, "nop")["swe-task"]
    assert row["status"] == "failed" and row["details"]["tests"] == {"tests": "failed"}


def test_no_run_tests_sh_fails_the_trial(cli, tmp_path: Path) -> None:
    dataset = tmp_path / "data"
    write_task(dataset, "no-runner", files={"solution.sh": "true\n", "tests/test_outputs.py": "def test_x():\n    pass\n"})
    row = run_host(cli, tmp_path, dataset, "oracle")["no-runner"]
    assert row["status"] == "failed" and row["details"]["failure_mode"] == "no_run_tests"


def test_a_huge_test_output_keeps_its_last_lines_and_the_summary(cli, tmp_path: Path) -> None:
    """12 MiB of output before the summary: exec's 10 MiB head cap would lose it; the last 50,000 lines keep it."""
    dataset = tmp_path / "data"
    write_task(dataset, "chatty", files={"solution.sh": "true\n", "run-tests.sh": f"""#!/bin/bash
        echo '{HEADER_LINE}'
        echo 'FAILED tests/test_outputs.py::test_early - in the head, beyond the kept lines'
        head -c 12582912 /dev/zero | tr '\\\\0' 'x' | fold -w 200
        echo
        echo '{HEADER_LINE}'
        echo 'PASSED tests/test_outputs.py::test_late'
        """})
    row = run_host(cli, tmp_path, dataset, "oracle")["chatty"]
    assert row["status"] == "passed", row
    assert row["details"]["tests"] == {"test_late": "passed"}


def test_a_crashed_agent_is_still_graded(cli, tmp_path: Path) -> None:
    dataset, config_dir = tmp_path / "data", tmp_path / "conf"
    write_task(dataset, "swe-task", dockerfile="FROM x\nWORKDIR /app\n", task_yaml="instruction: fix it\nparser_name: swebench\n",
               files={"run-tests.sh": SWEBENCH_RUN_TESTS, "solution.sh": "touch /app/fixed\n"})
    (config_dir / "harnesses").mkdir(parents=True)
    (config_dir / "harnesses" / "crash_after_solving.yaml").write_text(
        "name: crash_after_solving\ndescription: solves, then crashes\nimpl: crash_harness:CrashAfterSolving\n")
    pythonpath = os.pathsep.join([str(DATA / "terminal_bench_harness"), os.environ.get("PYTHONPATH", "")])
    row = run_host(cli, tmp_path, dataset, "crash_after_solving", "--config-dir", str(config_dir),
                   env={"PYTHONPATH": pythonpath})["swe-task"]
    assert row["status"] == "passed", row
    assert row["agent_exit_status"] == "agent_error" and "context length exceeded" in row["details"]["agent_error"]


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
    run_name = f"tb-{uuid.uuid4().hex[:8]}"  # unique: container names derive from it, on a shared engine
    for harness, status in (("oracle", "passed"), ("nop", "failed")):
        done = cli("run", "terminal_bench", harness, "none", "--env", "docker",
                   "--benchmark-params", json.dumps({"path": str(TB1)}),
                   "--results-dir", str(tmp_path), "--run-name", run_name, timeout=900)
        assert done.returncode == 0, done.stderr
        rows = trials(tmp_path / run_name / f"terminal_bench__{harness}__none__docker")
        assert {k: r["status"] for k, r in rows.items()} == {"greeting-file": status, "count-lines": status}, rows
    # No tmux in this image: solution.yaml's commands ran as one script, so `cd /app` carried over.
    counted = rows["count-lines"]["details"].get("tests", rows["count-lines"])
    assert {name.split(" - ")[0] for name in counted} == {"test_count", "test_data_unchanged"}
    assert counted["test_data_unchanged"] == "passed"  # nop leaves the image's data intact


@pytest.mark.docker
def test_terminal_bench_2_on_docker(cli, base_image: str, tmp_path: Path) -> None:
    run_name = f"tb2-{uuid.uuid4().hex[:8]}"
    for harness, status in (("oracle", "passed"), ("nop", "failed")):
        done = cli("run", "terminal_bench_2", harness, "none", "--env", "docker",
                   "--benchmark-params", json.dumps({"path": str(TB2)}),
                   "--results-dir", str(tmp_path), "--run-name", run_name, timeout=900)
        assert done.returncode == 0, done.stderr
        row = trials(tmp_path / run_name / f"terminal_bench_2__{harness}__none__docker")["sum-numbers"]
        assert row["status"] == status, row


TMUX_IMAGE = """FROM {base}
RUN apt-get update && apt-get install -y --no-install-recommends tmux && rm -rf /var/lib/apt/lists/*
WORKDIR /app
"""


def verdict_script(condition: str) -> str:
    """A run-tests.sh for the swebench parser: PASSED when the shell condition holds."""
    return f"""#!/bin/bash
        echo "SWEBench results starts here"
        if {condition}; then echo PASSED; else echo FAILED; fi
        echo "SWEBench results ends here"
        """


def run_docker(cli, tmp_path: Path, dataset: Path) -> dict:
    run_name = f"tb-{uuid.uuid4().hex[:8]}"  # unique: container names derive from it, on a shared engine
    done = cli("run", "terminal_bench", "oracle", "none", "--env", "docker", "--task-concurrency", "4",
               "--benchmark-params", json.dumps({"path": str(dataset)}), "--results-dir", str(tmp_path / "res"),
               "--run-name", run_name, timeout=900)
    assert done.returncode == 0, done.stderr
    return trials(next((tmp_path / "res" / run_name).iterdir()))


def python_repl_files() -> dict[str, str]:
    """Keystrokes typed into a Python REPL, as a terminal would take them, checked in the official tests shell
    (root, a login shell on a 160-column terminal)."""
    return {
        "solution.yaml": """
            - command: python3
              min_timeout_sec: 2
            - command: open('/app/out.txt', 'w').write('typed' + ' into python')
              min_timeout_sec: 0.5
            - command: C-d
              append_enter: false
              min_timeout_sec: 1
            - command: echo back in bash > /app/after.txt
              block: true
            """,
        "run-tests.sh": verdict_script('[ "$(cat /app/out.txt)" = "typed into python" ] && [ -f /app/after.txt ] '
                                       '&& [ "$(id -u)" = 0 ] && [ "$(tput cols)" = 160 ]')}


@pytest.mark.docker
def test_shells_are_tmux_sessions_where_the_image_has_tmux(cli, base_image: str, tmp_path: Path) -> None:
    dataset = tmp_path / "data"
    swebench = "instruction: x\nparser_name: swebench\n"
    image = TMUX_IMAGE.format(base=base_image)
    # run_tests_in_same_shell: the tests see what the agent exported in its shell; without it they do not.
    for name, same_shell in (("same-shell", "true"), ("fresh-shell", "false")):
        write_task(dataset, name, dockerfile=image, task_yaml=f"{swebench}run_tests_in_same_shell: {same_shell}\n",
                   files={"solution.yaml": "- export SECRET_WORD=xyzzy\n",
                          "run-tests.sh": verdict_script('[ "$SECRET_WORD" = xyzzy ]')})
    # Keystrokes typed into a Python REPL, as a terminal would take them.
    write_task(dataset, "python-repl", dockerfile=image, task_yaml=swebench, files=python_repl_files())
    rows = run_docker(cli, tmp_path, dataset)
    assert {k: r["status"] for k, r in rows.items()} == {"same-shell": "passed", "fresh-shell": "failed",
                                                         "python-repl": "passed"}, rows


@pytest.mark.docker
def test_tests_run_as_root_in_the_images_workdir_while_the_agent_runs_as_its_user(cli, base_image: str,
                                                                                   tmp_path: Path) -> None:
    dataset = tmp_path / "data"
    # No WORKDIR anywhere: the container's WorkingDir is `/`, as officially (not /app).
    write_task(dataset, "non-root", dockerfile=f"FROM {base_image}\nRUN useradd -m player\nUSER player\n",
               task_yaml="instruction: x\nparser_name: swebench\n",
               files={"solution.sh": "id -un > /tmp/agent-user; pwd > /tmp/agent-cwd\n",
                      "run-tests.sh": verdict_script('[ "$(cat /tmp/agent-user)" = player ] && [ "$(cat /tmp/agent-cwd)" = / ] '
                                                     '&& [ "$(id -u)" = 0 ] && [ "$PWD" = / ] && apt-get --version >/dev/null '
                                                     '&& touch /root/tests-were-root')})
    row = run_docker(cli, tmp_path, dataset)["non-root"]
    assert row["status"] == "passed", row


def test_the_default_recipe_is_the_leaderboards_dataset_and_head_is_offered(cli) -> None:
    shown = {name: cli("config", "show", name, "oracle", "none") for name in ("terminal_bench", "terminal_bench_head")}
    assert all(done.returncode == 0 for done in shown.values()), {k: v.stderr for k, v in shown.items()}
    # terminal-bench-core 0.1.1: tasks/ of laude-institute/terminal-bench at the commit the registry names.
    assert re.search(r"ref: 91e10457b5410f16c44364da1a34cb6de8c488a5\s+subdir: tasks", shown["terminal_bench"].stdout)
    assert re.search(r"ref: main\s+subdir: original-tasks", shown["terminal_bench_head"].stdout)


TWO_SERVICES = """
services:
  client:
    build:
      context: .
      args: {{GREETING: "${{T_BENCH_GREETING:-from build args}}"}}
    image: ${{T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME}}
    container_name: ${{T_BENCH_TASK_DOCKER_CLIENT_CONTAINER_NAME}}
    command: ["sh", "-c", "echo the compose command ran > /tmp/command-ran; sleep infinity"]
    environment:
      - TEST_DIR=${{T_BENCH_TEST_DIR}}
    volumes:
      - ${{T_BENCH_TASK_LOGS_PATH}}:${{T_BENCH_CONTAINER_LOGS_PATH}}
      - ${{T_BENCH_TASK_AGENT_LOGS_PATH}}:${{T_BENCH_CONTAINER_AGENT_LOGS_PATH}}
      - shared:/shared
    tmpfs:
      - /scratch:size=1m
    deploy:
      resources:
        limits: {{memory: 256M}}
    depends_on:
      server: {{condition: service_healthy}}
  server:
    image: {base}
    command: ["sh", "-c", "sleep 3 && echo 42 > /shared/answer.txt && cd /shared && exec python3 -m http.server 8000"]
    volumes:
      - shared:/shared
    healthcheck:
      test: ["CMD", "python3", "-c", "import urllib.request as u; u.urlopen('http://localhost:8000/answer.txt')"]
      interval: 500ms
      retries: 60
"""
CLIENT_DOCKERFILE = """FROM {base}
ARG GREETING
RUN echo "$GREETING" > /greeting
WORKDIR /app
"""
# Ask the server service for its answer, once: its healthcheck was waited for before the client started.
FETCH = "python3 -c 'import urllib.request as u; print(u.urlopen(\"http://server:8000/answer.txt\").read().decode().strip())'"


@pytest.mark.docker
def test_a_two_service_compose_task_runs_all_its_services_on_the_trials_network(cli, base_image: str,
                                                                                 tmp_path: Path) -> None:
    dataset = tmp_path / "data"
    write_task(dataset, "web-client", dockerfile=CLIENT_DOCKERFILE.format(base=base_image),
               compose=TWO_SERVICES.format(base=base_image), task_yaml="instruction: x\nparser_name: swebench\n",
               files={"solution.sh": f"{FETCH} > /app/fetched.txt\n",
                      "run-tests.sh": verdict_script(
                          '[ "$(cat /app/fetched.txt)" = 42 ] '  # the server answered the agent
                          f'&& [ "$({FETCH})" = 42 ] '  # and answers the tests
                          '&& [ -f /tmp/command-ran ] '  # the client's compose command ran, not a keep-alive
                          '&& [ "$(cat /greeting)" = "from build args" ] '
                          '&& [ -d /logs ] && [ -d /agent-logs ] '
                          '&& ! dd if=/dev/zero of=/scratch/big bs=1M count=2 2>/dev/null '  # tmpfs size=1m
                          '&& [ "$(cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes)" = 268435456 ]')})
    row = run_docker(cli, tmp_path, dataset)["web-client"]
    assert row["status"] == "passed", row
    run_name = next((tmp_path / "res").iterdir()).name
    leftovers = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=run={run_name}"], capture_output=True, text=True)
    networks = subprocess.run(["docker", "network", "ls", "-q", "--filter", f"label=run={run_name}"], capture_output=True,
                              text=True)
    volumes = subprocess.run(["docker", "volume", "ls", "-q", "--filter", f"label=run={run_name}"], capture_output=True,
                             text=True)
    assert (leftovers.stdout, networks.stdout, volumes.stdout) == ("", "", ""), "a service, network or volume was left"


@pytest.mark.docker
def test_compose_container_details_reach_the_engine(base_image: str, tmp_path: Path) -> None:
    from agentcompass.providers.docker.provider import DockerProvider
    from agentcompass.core.sandbox import ComposeSpec, ContainerSpec, SandboxSpec

    name = f"ac-test-compose-{uuid.uuid4().hex[:8]}"
    client = ContainerSpec(name="client", image=base_image, command=["sleep", "infinity"], user="nobody",
                           tmpfs={"/scratch": "size=2m"}, cap_add=["NET_ADMIN"], privileged=False)
    # (privileged is passed the same way; this machine's engine cannot start privileged containers)
    server = ContainerSpec(name="db", image=base_image, command=["sleep", "infinity"], cpus=0.5, memory_mb=128)
    box = DockerProvider().open(SandboxSpec(name=name, image=base_image, workdir="/", labels={"agentcompass": "1"},
                                            compose=ComposeSpec(client=client, services=[server])))
    try:
        assert box.exec("id -un").stdout.strip() == "nobody"
        assert box.exec("getent hosts db").exit_code == 0  # the service answers to its name
        details = json.loads(subprocess.run(["docker", "inspect", name, f"{name}-db"], capture_output=True, text=True,
                                            check=True).stdout)
        mine, theirs = details
        assert mine["HostConfig"]["Tmpfs"] == {"/scratch": "size=2m"} and mine["HostConfig"]["CapAdd"] == ["NET_ADMIN"]
        assert mine["Config"]["Cmd"] == ["sleep", "infinity"]
        assert theirs["HostConfig"]["Memory"] == 128 * 2**20
        assert theirs["HostConfig"]["NanoCpus"] == 500_000_000
    finally:
        box.close()
    gone = subprocess.run(["docker", "inspect", f"{name}-db"], capture_output=True)
    assert gone.returncode != 0
    assert subprocess.run(["docker", "network", "inspect", name], capture_output=True).returncode != 0


SLOW_RUN_TESTS = """#!/bin/bash
echo "=========================== short test summary info ============================"
echo "PASSED tests/test_outputs.py::test_it"
sleep 30
"""


def test_a_test_timeout_after_an_agent_timeout_is_parsed_as_officially(cli, tmp_path: Path) -> None:
    """terminal-bench's harness: once the agent failed (here: timed out), a test timeout does not end the
    trial; the pane is parsed as it is. After an agent that finished, a test timeout is unresolved."""
    dataset = tmp_path / "data"
    write_task(dataset, "slow-tests", dockerfile="FROM x\nWORKDIR /app\n",
               task_yaml="instruction: wait\nmax_agent_timeout_sec: 2\nmax_test_timeout_sec: 4\n",
               files={"solution.sh": "sleep 30\n", "run-tests.sh": SLOW_RUN_TESTS})
    after_agent_timeout = run_host(cli, tmp_path, dataset, "oracle")["slow-tests"]
    assert after_agent_timeout["agent_exit_status"] == "timeout", after_agent_timeout
    assert after_agent_timeout["status"] == "passed", after_agent_timeout
    after_nop = run_host(cli, tmp_path, dataset, "nop")["slow-tests"]
    assert after_nop["status"] == "failed" and after_nop["details"]["failure_mode"] == "test_timeout", after_nop


def test_without_tmux_the_tests_output_is_cut_to_what_the_pane_holds() -> None:
    from agentcompass.formats.terminal_bench.format import KEPT_ROWS, last_rows

    lines = [f"line {n}" for n in range(5000)]
    assert last_rows("\n".join(lines) + "\n").splitlines() == lines[-KEPT_ROWS:]
    wide = ["x" * 161] * 1100  # two rows each
    assert len(last_rows("\n".join(wide) + "\n").splitlines()) == KEPT_ROWS // 2
