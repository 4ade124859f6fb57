"""Terminal-Bench (v1) task format: the original task directories, graded as its harness grades them.

A task dir holds task.yaml (instruction, max_agent_timeout_sec, max_test_timeout_sec, ...), a
Dockerfile or a docker-compose.yaml with a single `client` service, solution.sh or solution.yaml
(a list of commands), run-tests.sh and tests/. Grading copies tests/ and run-tests.sh to /tests
($TEST_DIR), runs run-tests.sh in the workdir and parses pytest's `-rA` short test summary: the task
is resolved when at least one test was reported and every one passed. As in the original, XFAIL and
SKIPPED count as passed; FAILED, ERROR and XPASS do not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentcompass.errors import UserError, VerifierError
from agentcompass.formats.base import SelectionParams, render_instruction, run_solution, select_tasks
from agentcompass.formats.sources import dataset_root
from agentcompass.schema import Recipe
from agentcompass.task import AgentOutcome, Grade, Task

if TYPE_CHECKING:
    from agentcompass.sandbox import Sandbox
    from agentcompass.trial import TrialContext

TEST_DIR = "/tests"  # the original harness's container test dir, also exported as $TEST_DIR
ORACLE_DIR = "/oracle"
DEFAULT_AGENT_TIMEOUT = 360.0  # the original's task.yaml defaults
DEFAULT_TEST_TIMEOUT = 60.0
DEFAULT_WORKDIR = "/app"
COMPOSE_FILES = ("docker-compose.yaml", "docker-compose.yml")
# What the original harness substitutes into docker-compose.yaml; other ${VARS} are its own plumbing.
HARNESS_VARS = {"T_BENCH_TEST_DIR": TEST_DIR, "T_BENCH_CONTAINER_LOGS_PATH": "/logs",
                "T_BENCH_CONTAINER_AGENT_LOGS_PATH": "/agent-logs"}
DEFAULT_RUN_TESTS = f"""#!/bin/bash
# agentcompass: this task has no run-tests.sh; run its tests with the image's pytest.
cd {DEFAULT_WORKDIR} 2>/dev/null || true
python3 -m pytest -rA "$TEST_DIR"
"""

# -- pytest -rA short test summary ---------------------------------------------------------
PASSING = {"passed", "xfail", "skipped"}
SUMMARY_HEADER = re.compile(r"^=+ short test summary info =+$")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# `STATUS nodeid` with an optional ` - message`; a parametrize id may hold spaces inside [...].
RESULT_LINE = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS)\s+([^\s\[]+(?:\[.*?\])?)(?:\s+-\s.*)?\s*$")
# `SKIPPED [2] tests/test_x.py:12: reason`: a location, not a node id.
SKIPPED_LINE = re.compile(r"^SKIPPED\s+(?:\[\d+\]\s+)?(\S+?)(?::\s.*|\s+-\s.*)?$")


def parse_pytest_summary(output: str) -> dict[str, str]:
    """Test id -> passed | failed | error | skipped | xfail | xpass, from every -rA summary section.

    A test reported more than once (run-tests.sh ran pytest twice) keeps its worst outcome.
    """
    results: dict[str, str] = {}
    in_summary = False
    for raw in output.splitlines():
        line = ANSI.sub("", raw).rstrip("\r").strip()
        if SUMMARY_HEADER.match(line):
            in_summary = True
            continue
        if not in_summary:
            continue
        if line.startswith("=="):  # the closing `=== 3 passed in 0.1s ===` line ends the section
            in_summary = False
            continue
        if match := RESULT_LINE.match(line):
            status, test_id = match.group(1).lower(), match.group(2)
        elif match := SKIPPED_LINE.match(line):
            status, test_id = "skipped", match.group(1)
        else:
            continue  # a wrapped message line, or text that is not a result
        if test_id not in results or status not in PASSING:
            results[test_id] = status
    return results


def grade_tests(tests: dict[str, str], exit_code: int) -> Grade:
    failing = sorted(t for t, s in tests.items() if s not in PASSING)
    details: dict[str, Any] = {"tests": tests, "test_exit_code": exit_code}
    if not tests:
        return Grade(passed=False, reward=0.0, details=details,
                     message="no pytest -rA short test summary in the test output; see verifier.log")
    passed = not failing
    message = f"{len(tests) - len(failing)}/{len(tests)} tests passed" + ("" if passed else f"; not passing: {', '.join(failing)}")
    return Grade(passed=passed, reward=1.0 if passed else 0.0, message=message, details=details)


# -- task directories ----------------------------------------------------------------------
@dataclass
class Container:
    """What the task's Dockerfile or docker-compose.yaml says about its one container."""

    build_context: Path | None = None
    image: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    workdir: str | None = None


def read_yaml(path: Path) -> Any:
    import yaml

    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise UserError(f"{path}: not valid YAML ({' '.join(str(exc).split())})") from exc


def substitute(value: str) -> str | None:
    """The value with the harness's ${T_BENCH_...} variables filled in; None if others remain."""
    for name, replacement in HARNESS_VARS.items():
        value = value.replace(f"${{{name}}}", replacement)
    return None if "${" in value else value


def compose_env(raw: Any) -> dict[str, str]:
    """A service's `environment` (list of KEY=VALUE or mapping); a bare KEY (taken from the host) is skipped."""
    items = raw.items() if isinstance(raw, dict) else (str(e).split("=", 1) for e in raw or [] if "=" in str(e))
    env = {}
    for key, value in items:
        resolved = substitute(str(value)) if value is not None else None
        if resolved is not None:
            env[str(key)] = resolved
    return env


def read_container(task_dir: Path) -> Container:
    compose = next((task_dir / n for n in COMPOSE_FILES if (task_dir / n).is_file()), None)
    if compose is None:
        if (task_dir / "Dockerfile").is_file():
            return Container(build_context=task_dir)
        raise UserError(f"Terminal-Bench task '{task_dir.name}' has neither a Dockerfile nor a docker-compose.yaml")
    data = read_yaml(compose)
    services = data.get("services") if isinstance(data, dict) else None
    if not isinstance(services, dict) or not services:
        raise UserError(f"{compose}: no services; a Terminal-Bench task needs a `client` service")
    if len(services) > 1:
        raise UserError(f"{compose}: services {', '.join(services)}; only a single client service is supported, "
                        f"leave task '{task_dir.name}' out of the selection (sample_ids or filter)")
    service = next(iter(services.values())) or {}
    container = Container(env=compose_env(service.get("environment")))
    build = service.get("build")
    if build is not None:
        spec = {"context": build} if isinstance(build, str) else dict(build)
        context = (task_dir / str(spec.get("context") or ".")).resolve()
        dockerfile = str(spec.get("dockerfile") or "Dockerfile")
        # Providers build `<context>/Dockerfile`; another file name would be silently ignored.
        if dockerfile != "Dockerfile" or not (context / dockerfile).is_file():
            raise UserError(f"{compose}: the client service must build from a file named Dockerfile in its context "
                            f"(got context {spec.get('context') or '.'!r}, dockerfile {dockerfile!r})")
        container.build_context = context
    image = substitute(str(service.get("image") or ""))
    if build is None:
        if not image:
            raise UserError(f"{compose}: the client service has neither build nor a literal image")
        container.image = image
    working_dir = substitute(str(service.get("working_dir") or ""))
    container.workdir = working_dir or None
    return container


def dockerfile_workdir(context: Path | None) -> str | None:
    """The last absolute WORKDIR of the Dockerfile: where the original's shell starts."""
    if context is None:
        return None
    found = re.findall(r"^\s*WORKDIR\s+(/\S*)\s*$", (context / "Dockerfile").read_text(errors="replace"), re.MULTILINE | re.IGNORECASE)
    return found[-1] if found and "$" not in found[-1] else None


def solution_commands(path: Path) -> list[str]:
    """solution.yaml: a list of commands, each a string or {command: ...} (timeouts and keystroke flags are tmux-only)."""
    data = read_yaml(path)
    entries = data if isinstance(data, list) else None
    commands = [e if isinstance(e, str) else e.get("command") if isinstance(e, dict) else None for e in entries or []]
    if not commands or not all(isinstance(c, str) for c in commands):
        raise UserError(f"{path}: expected a list of commands (strings or mappings with a `command` key)")
    return commands


def instruction_of(meta: dict[str, Any]) -> str:
    """task.yaml's `instruction`, or the `base` entry of the early `descriptions` list."""
    if isinstance(meta.get("instruction"), str):
        return meta["instruction"]
    for entry in meta.get("descriptions") or []:
        if isinstance(entry, dict) and entry.get("key", "base") == "base":
            return str(entry.get("description", ""))
    return ""


class TerminalBenchFormat:
    Params = SelectionParams

    def __init__(self, recipe: Recipe) -> None:
        self.recipe = recipe

    def load(self) -> list[Task]:
        root = dataset_root(self.recipe)
        dirs = [root] if (root / "task.yaml").is_file() else sorted(p.parent for p in root.glob("*/task.yaml"))
        if not dirs:
            raise UserError(f"benchmark '{self.recipe.name}': no Terminal-Bench tasks (dirs with task.yaml) in {root}")
        by_id = {d.name: d for d in dirs}
        # Select before reading: a task this format cannot run only matters when it is chosen.
        chosen = select_tasks([Task(id=d.name, instruction="") for d in dirs], self.recipe.params)
        return [self.load_task(by_id[t.id]) for t in chosen]

    def load_task(self, task_dir: Path) -> Task:
        recipe = self.recipe
        meta = read_yaml(task_dir / "task.yaml")
        if not isinstance(meta, dict):
            raise UserError(f"{task_dir / 'task.yaml'}: expected a mapping with an `instruction`")
        container = read_container(task_dir)
        solution_yaml = task_dir / "solution.yaml"
        return Task(
            id=task_dir.name,
            instruction=render_instruction(recipe, instruction=instruction_of(meta), task_id=task_dir.name),
            workdir=recipe.workdir or container.workdir or dockerfile_workdir(container.build_context) or DEFAULT_WORKDIR,
            image=(recipe.image.format(task_id=task_dir.name) if recipe.image else None) or container.image,
            build_context=None if recipe.image else container.build_context,
            runs_on_host=recipe.runs_on_host,
            env={"TEST_DIR": TEST_DIR, **container.env, **recipe.env},
            cpus=recipe.resources.cpus,
            memory_mb=recipe.resources.memory_mb,
            allow_internet=recipe.allow_internet if recipe.allow_internet is not None else True,
            agent_timeout_s=recipe.timeouts.agent or meta.get("max_agent_timeout_sec") or DEFAULT_AGENT_TIMEOUT,
            verify_timeout_s=recipe.timeouts.verify or meta.get("max_test_timeout_sec") or DEFAULT_TEST_TIMEOUT,
            build_timeout_s=recipe.timeouts.build,
            data={
                "dir": str(task_dir),
                "solution_commands": solution_commands(solution_yaml) if solution_yaml.is_file() else None,
            },
        )

    # -- trial phases --------------------------------------------------------------------
    def stage(self, task: Task, sandbox: "Sandbox", trial: "TrialContext") -> None:
        """Nothing to do: the task's image holds its starting state."""

    def solve(self, task: Task, sandbox: "Sandbox", trial: "TrialContext") -> AgentOutcome:
        script = Path(task.data["dir"]) / "solution.sh"
        commands = task.data.get("solution_commands")
        if commands:
            # One shell for all commands, as the original types them into one tmux session.
            script = trial.write("solution.sh", "\n".join(commands) + "\n")
        elif not script.is_file():
            raise VerifierError(f"task '{task.id}' has neither solution.sh nor solution.yaml for the oracle")
        sandbox.upload(script, f"{ORACLE_DIR}/solution.sh")
        return run_solution(task, sandbox, trial, f"bash {ORACLE_DIR}/solution.sh")

    def grade(self, task: Task, sandbox: "Sandbox", trial: "TrialContext", outcome: AgentOutcome) -> Grade:
        task_dir = Path(task.data["dir"])
        if (task_dir / "tests").is_dir():
            sandbox.upload(task_dir / "tests", TEST_DIR)
        run_tests = task_dir / "run-tests.sh"
        if not run_tests.is_file():
            run_tests = trial.write("run-tests.sh", DEFAULT_RUN_TESTS)
        sandbox.upload(run_tests, f"{TEST_DIR}/run-tests.sh")
        # 2>&1: the original reads one terminal, where both streams interleave.
        result = sandbox.exec(f"bash {TEST_DIR}/run-tests.sh 2>&1", env={"TEST_DIR": TEST_DIR}, timeout=task.verify_timeout_s)
        trial.write("verifier.log", result.stdout + result.stderr)
        if result.timed_out:
            return Grade(passed=False, reward=0.0, message=f"tests timed out after {task.verify_timeout_s:.0f}s",
                         details={"failure_mode": "test_timeout"})
        return grade_tests(parse_pytest_summary(result.stdout + result.stderr), result.exit_code)
