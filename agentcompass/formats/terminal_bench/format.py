"""Terminal-Bench (v1) task format: the original task directories, graded as its harness grades them.

A task dir holds task.yaml (instruction, parser_name, max_agent_timeout_sec, max_test_timeout_sec,
run_tests_in_same_shell, ...), a Dockerfile and/or a docker-compose.yaml whose `client` service is
the sandbox, solution.sh or solution.yaml (keystrokes), run-tests.sh and tests/. Grading copies
tests/ and run-tests.sh to /tests, types `bash /tests/run-tests.sh` into a fresh root shell (the
agent's, with run_tests_in_same_shell) and parses the whole output with the task's parser (see
terminal_bench_parsers). Where the image (or, on the local provider, the host) has tmux, shells are
tmux sessions as officially, an agent harness's commands included (terminal_bench_shell); where it
has none, commands run through exec with the output in a file, cut to the rows a tmux pane keeps.
"""

from __future__ import annotations

import re
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from agentcompass.core.errors import UserError, VerifierError
from agentcompass.core.safe_files import download_checked
from agentcompass.formats.base import SelectionParams, render_instruction, run_solution, select_tasks
from agentcompass.formats.integrity import clear_verifier_inputs
from agentcompass.formats.verifier_guard import check_changes
from agentcompass.formats.sources import dataset_root
from agentcompass.formats.terminal_bench.compose import CLIENT, COMPOSE_FILES, TEST_DIR, read_services, read_yaml
from agentcompass.formats.terminal_bench.parsers import PARSERS, ParseError, parse_test_output, resolved
from agentcompass.formats.terminal_bench.shell import AgentShell
from agentcompass.formats.terminal_bench.tmux import Keystrokes, SessionTimeout, TmuxSession, has_tmux
from agentcompass.core.sandbox import ComposeSpec
from agentcompass.core.schema import Recipe
from agentcompass.core.task import AgentOutcome, Grade, Task

if TYPE_CHECKING:
    from agentcompass.core.sandbox import Sandbox
    from agentcompass.core.context import TrialContext

ORACLE_DIR = "/oracle"
# Agent exit statuses terminal-bench records as a failure mode before the tests (agent timeout, context length).
AGENT_FAILURES = ("timeout", "context_window_exceeded")
DEFAULT_AGENT_TIMEOUT = 360.0  # the original's task.yaml defaults
DEFAULT_TEST_TIMEOUT = 60.0
HOST_WORKDIR = "/app"  # for tasks run on the host, which has no image to take a WorkingDir from
# What the official pane holds: tmux's default 2,000 rows of history (the harness's `set-option history-limit
# 50000` comes after the window exists, and tmux applies it to new windows only) plus the 40 visible rows.
KEPT_ROWS = 2000 + 40
PANE_COLUMNS = 160
TEST_LOG = "/tmp/agentcompass-run-tests.log"
TERMINAL_ENV = {"COLUMNS": "160", "LINES": "40"}  # the official pane's size, for tools that read it


def grade_tests(tests: dict[str, str], exit_code: int | None = None) -> Grade:
    """Resolved when every parsed test passed (officially also when none was parsed after a summary header)."""
    failing = sorted(t for t, s in tests.items() if s not in ("passed", "xfail", "skipped"))
    details: dict[str, Any] = {"tests": tests, "test_exit_code": exit_code}
    passed = resolved(tests)
    message = f"{len(tests) - len(failing)}/{len(tests)} tests passed" + ("" if passed else f"; not passing: {', '.join(failing)}")
    return Grade(passed=passed, reward=1.0 if passed else 0.0, message=message, details=details)


def last_rows(text: str, rows: int = KEPT_ROWS, columns: int = PANE_COLUMNS) -> str:
    """The lines that fit in the last `rows` rows of a `columns`-wide pane (a longer line takes several)."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    kept: list[str] = []
    used = 0
    for line in reversed(lines):
        used += max(1, -(-len(line) // columns))
        if used > rows:
            break
        kept.append(line)
    return "".join(line + "\n" for line in reversed(kept))


def failed(message: str, failure_mode: str, **details: Any) -> Grade:
    return Grade(passed=False, reward=0.0, message=message, details={"failure_mode": failure_mode, **details})


def last_stage_workdir(context: Path | None) -> str | None:
    """The last absolute WORKDIR of the Dockerfile's last stage (None when it inherits one)."""
    if context is None or not (context / "Dockerfile").is_file():
        return None
    text = (context / "Dockerfile").read_text(errors="replace")
    last_stage = re.split(r"^\s*FROM\s", text, flags=re.MULTILINE | re.IGNORECASE)[-1]
    found = re.findall(r"^\s*WORKDIR\s+(/\S*)\s*$", last_stage, re.MULTILINE | re.IGNORECASE)
    return found[-1] if found and "$" not in found[-1] else None


def solution_keystrokes(path: Path) -> list[Keystrokes]:
    """solution.yaml: a list of commands, each a string or a mapping (command, block, append_enter, timeouts)."""
    data = read_yaml(path)
    if not isinstance(data, list) or not data:
        raise ValueError("expected a list of commands")
    return [Keystrokes.parse(entry) for entry in data]


def instruction_of(meta: dict[str, Any]) -> str:
    """task.yaml's `instruction`, or the `base` entry of the early `descriptions` list."""
    if isinstance(meta.get("instruction"), str):
        return meta["instruction"]
    for entry in meta.get("descriptions") or []:
        if isinstance(entry, dict) and entry.get("key", "base") == "base":
            return str(entry.get("description", ""))
    return ""


def uses_terminal(sandbox: "Sandbox") -> bool:
    """Shells are tmux sessions where the sandbox has tmux (every official image does; the host may)."""
    return has_tmux(sandbox)


class TerminalBenchParams(SelectionParams):
    # tmux: an agent harness's commands run in the trial's tmux login shell, as officially; bash: each in a fresh `bash -c`
    agent_shell: Literal["tmux", "bash"] = "tmux"


class TerminalBenchFormat:
    # An agent that crashed (a model error, a context overflow) is still graded, as officially.
    grades_after_agent_error = True

    Params = TerminalBenchParams

    def __init__(self, recipe: Recipe) -> None:
        self.recipe = recipe

    def load(self) -> list[Task]:
        root = dataset_root(self.recipe)
        dirs = [root] if (root / "task.yaml").is_file() else sorted(p.parent for p in root.glob("*/task.yaml"))
        subset = self.recipe.source.get("task_id_subset")
        if subset is not None and not self.recipe.params.get("path"):
            # A registry row's subset, as terminal-bench's registry client prunes the download: a dir it does
            # not name is dropped, a name without a dir is simply absent. A run-time `path` is the user's own
            # directory, read whole as `tb run --dataset-path` reads it.
            if not isinstance(subset, list) or not all(isinstance(i, str) for i in subset):
                raise UserError(f"benchmark '{self.recipe.name}': source.task_id_subset must be a list of task ids "
                                f"(task directory names) or null, not {subset!r}")
            dirs = [d for d in dirs if d.name in set(subset)]
        if not dirs:
            raise UserError(f"benchmark '{self.recipe.name}': no Terminal-Bench tasks (dirs with task.yaml) in {root}")
        by_id = {d.name: d for d in dirs}
        # Select before reading: a task this format cannot run only matters when it is chosen.
        chosen = select_tasks([Task(id=d.name, instruction="") for d in dirs], self.recipe.params, self.recipe.name)
        return [self.load_task(by_id[t.id]) for t in chosen]

    def load_task(self, task_dir: Path) -> Task:
        recipe = self.recipe
        meta = read_yaml(task_dir / "task.yaml")
        if not isinstance(meta, dict):
            raise UserError(f"{task_dir / 'task.yaml'}: expected a mapping with an `instruction`")
        parser = str(meta.get("parser_name") or "pytest")
        if parser not in PARSERS:
            raise UserError(f"{task_dir / 'task.yaml'}: parser_name {parser!r} is not one of {', '.join(PARSERS)}")
        services = read_services(task_dir)
        client = services.pop(CLIENT)
        has_compose = any((task_dir / name).is_file() for name in COMPOSE_FILES)
        # Officially the container's WorkingDir: compose's working_dir, else the image's own ("" asks
        # the provider for it). The host has no image: the Dockerfile's WORKDIR, else /app.
        workdir = recipe.workdir or client.workdir or (
            (last_stage_workdir(client.build_context) or HOST_WORKDIR) if recipe.runs_on_host else "")
        return Task(
            id=task_dir.name,
            instruction=render_instruction(recipe, instruction=instruction_of(meta), task_id=task_dir.name),
            workdir=workdir,
            image=(recipe.image.format(task_id=task_dir.name) if recipe.image else None) or client.image,
            build_context=None if recipe.image else client.build_context,
            runs_on_host=recipe.runs_on_host,
            env={**client.env, **recipe.env},
            cpus=recipe.resources.cpus or client.cpus,
            memory_mb=recipe.resources.memory_mb or client.memory_mb,
            allow_internet=recipe.allow_internet if recipe.allow_internet is not None else True,
            agent_timeout_s=recipe.timeouts.agent or meta.get("max_agent_timeout_sec") or DEFAULT_AGENT_TIMEOUT,
            verify_timeout_s=recipe.timeouts.verify or meta.get("max_test_timeout_sec") or DEFAULT_TEST_TIMEOUT,
            build_timeout_s=recipe.timeouts.build,
            # The compose file's services and container details (docker); none for a bare Dockerfile.
            compose=ComposeSpec(client=client, services=list(services.values())) if has_compose else None,
            data={"dir": str(task_dir), "parser": parser, "same_shell": bool(meta.get("run_tests_in_same_shell"))},
        )

    # -- trial phases --------------------------------------------------------------------
    def stage(self, task: Task, sandbox: "Sandbox", trial: "TrialContext") -> None:
        """The task's image holds its starting state. On the host, the folders the oracle and the tests are
        copied to later exist from the start: a shell started before them would not see them (the local
        provider's bubblewrap shows the workspace's folders as they are when a command starts)."""
        if task.runs_on_host:
            with tempfile.TemporaryDirectory() as empty:
                for folder in (ORACLE_DIR, TEST_DIR):
                    sandbox.upload(Path(empty), folder)

    def run_agent(self, harness: Any, task: Task, sandbox: "Sandbox", model: Any, trial: "TrialContext") -> AgentOutcome:
        """The harness works in the trial's tmux login shell (session `agent`), as officially, where there is tmux."""
        if self.recipe.params.get("agent_shell", "tmux") == "tmux" and uses_terminal(sandbox):
            sandbox = AgentShell.open(sandbox)
        return harness.run(task, sandbox, model, trial, self)

    def solve(self, task: Task, sandbox: "Sandbox", trial: "TrialContext") -> AgentOutcome:
        """The oracle, as officially: solution.sh when there is one, else solution.yaml's keystrokes,
        typed into the agent's shell."""
        shell = sandbox if isinstance(sandbox, AgentShell) else None
        sandbox = shell.sandbox if shell else sandbox
        task_dir = Path(task.data["dir"])
        script = task_dir / "solution.sh"
        keystrokes = None
        if not script.is_file():
            if not (task_dir / "solution.yaml").is_file():
                raise VerifierError(f"task '{task.id}' has neither solution.sh nor solution.yaml for the oracle")
            try:
                keystrokes = solution_keystrokes(task_dir / "solution.yaml")
            except ValueError as exc:
                raise VerifierError(f"task '{task.id}': solution.yaml: {exc}") from exc
        if shell is None and not uses_terminal(sandbox):
            return self._solve_without_terminal(task, sandbox, trial, script, keystrokes)
        session = shell.session if shell else AgentShell.open(sandbox).session
        deadline = time.monotonic() + (task.agent_timeout_s or DEFAULT_AGENT_TIMEOUT)
        status = "completed"
        try:
            if keystrokes is None:
                sandbox.upload(script, f"{ORACLE_DIR}/solution.sh")
                session.send_keys([f"bash {ORACLE_DIR}/solution.sh", "Enter"], block=True,
                                  max_timeout_sec=deadline - time.monotonic())
            for entry in keystrokes or []:
                if time.monotonic() > deadline:
                    raise SessionTimeout("agent timeout")
                entry.max_timeout_sec = min(entry.max_timeout_sec, deadline - time.monotonic())
                session.type_command(entry)
        except SessionTimeout:
            status = "timeout"
        trial.write("agent.log", session.capture())
        return AgentOutcome(exit_status=status)

    def _solve_without_terminal(self, task: Task, sandbox: "Sandbox", trial: "TrialContext", script: Path,
                                keystrokes: list[Keystrokes] | None) -> AgentOutcome:
        """No tmux in the image: the commands typed with Enter run as one bash script; bare keys are not sent."""
        if keystrokes is not None:
            script = trial.write("solution.sh", "".join(k.command + "\n" for k in keystrokes if k.append_enter))
        sandbox.upload(script, f"{ORACLE_DIR}/solution.sh")
        return run_solution(task, sandbox, trial, f"bash {ORACLE_DIR}/solution.sh")

    def grade(self, task: Task, sandbox: "Sandbox", trial: "TrialContext", outcome: AgentOutcome) -> Grade:
        grade = self._grade(task, sandbox, trial, agent_failed=outcome.exit_status in AGENT_FAILURES
                            or outcome.exit_status.endswith("_error"))
        if outcome.exit_status.endswith("_error"):  # the agent crashed: say so beside the verdict
            grade.details["agent_error"] = outcome.message
        return grade

    def _grade(self, task: Task, sandbox: "Sandbox", trial: "TrialContext", agent_failed: bool = False) -> Grade:
        task_dir = Path(task.data["dir"])
        run_tests = task_dir / "run-tests.sh"
        if not run_tests.is_file():  # officially the copy fails and the trial is unresolved
            return failed(f"task '{task.id}' has no run-tests.sh", "no_run_tests")
        # The tests are copied in after the agent, as the official harness does; whatever the agent put in
        # /tests (a conftest.py, a run-tests.sh of its own) goes first, and its log file with it.
        # The tests run where the agent worked: what it planted for them to run fails the attempt (verifier_guard.py).
        changed = check_changes(sandbox, task.workdir, trial)
        trial.flag_tampering(clear_verifier_inputs(sandbox, dirs=(TEST_DIR,), files=(TEST_LOG, f"{TEST_LOG}.tail"),
                                                   make=(TEST_DIR,), keep={TEST_DIR: "root"}))
        if (task_dir / "tests").is_dir():
            sandbox.upload(task_dir / "tests", TEST_DIR)
        sandbox.upload(run_tests, f"{TEST_DIR}/run-tests.sh")
        same_shell = task.data.get("same_shell", False)
        if uses_terminal(sandbox):
            output, timed_out, exit_code = *self._test_in_tmux(task, sandbox, same_shell), None
        else:
            output, timed_out, exit_code = self._test_with_exec(task, sandbox, trial, same_shell)
        trial.write("verifier.log", output)
        # Officially a test timeout is not parsed, unless the agent already failed (timed out, crashed): its
        # failure mode stands and the pane is parsed as it is (terminal-bench's harness.py _run_trial).
        if timed_out and not agent_failed:
            return failed(f"tests timed out after {task.verify_timeout_s:.0f}s", "test_timeout")
        try:
            tests = parse_test_output(task.data.get("parser", "pytest"), output)
        except ParseError as exc:
            return failed(f"{exc}; see verifier.log", "parse_error", test_exit_code=exit_code)
        grade = grade_tests(tests, exit_code)
        grade.details.update(changed)
        return grade

    def _test_in_tmux(self, task: Task, sandbox: "Sandbox", same_shell: bool) -> tuple[str, bool]:
        """run-tests.sh typed into a root tmux session (the agent's own with same_shell): (pane, timed out)."""
        session = TmuxSession(sandbox, "agent") if same_shell else TmuxSession(sandbox, "tests", user="root")
        if not same_shell or not session.exists():
            session.start()
        try:
            session.send_keys([f"bash {TEST_DIR}/run-tests.sh", "Enter"], block=True,
                              max_timeout_sec=task.verify_timeout_s or DEFAULT_TEST_TIMEOUT)
        except SessionTimeout:
            return session.capture(), True
        return session.capture(), False

    def _test_with_exec(self, task: Task, sandbox: "Sandbox", trial: "TrialContext",
                        same_shell: bool) -> tuple[str, bool, int]:
        """run-tests.sh with its output in a file, of which what the official pane would hold is read back."""
        result = sandbox.exec(f"bash {TEST_DIR}/run-tests.sh > {TEST_LOG} 2>&1", env={**TERMINAL_ENV},
                              timeout=task.verify_timeout_s, user=None if same_shell else "root")
        sandbox.exec(f"tail -n {KEPT_ROWS} {TEST_LOG} > {TEST_LOG}.tail", user="root", timeout=120)
        local = trial.dir / "verifier.tail"
        try:
            download_checked(sandbox, f"{TEST_LOG}.tail", local, trial)  # a planted link: tampering, never followed
            output = last_rows(local.read_text(encoding="utf-8", errors="replace"))
        except FileNotFoundError:
            output = result.stdout + result.stderr
        finally:
            local.unlink(missing_ok=True)
        return output, result.timed_out, result.exit_code
