"""SWE-bench task format: one GitHub issue per task, graded by swebench's own eval script and log parsers.

A trial's sandbox holds the repository at /testbed (the instance image, or a seeded checkout
where no image is used). After the harness, the patch is the diff of /testbed against the
commit it started from, new files included; the instance's eval script then applies the
test patch and runs the tests in the same sandbox, and swebench's `get_eval_report` grades
the log. Every run also writes predictions.jsonl, which the official harness and sb-cli accept.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentcompass.errors import InfraError, UserError
from agentcompass.formats.base import render_instruction, select_tasks, source_path
from agentcompass.formats.swebench_data import (
    check_gradable,
    image_name,
    normalize_row,
    read_hf_dataset,
    read_rows_file,
    instance_for_test_spec,
)
from agentcompass.results import write_atomic
from agentcompass.schema import Recipe
from agentcompass.task import AgentOutcome, Grade, Task

if TYPE_CHECKING:
    from agentcompass.results import TrialResult
    from agentcompass.sandbox import Sandbox
    from agentcompass.trial import TrialContext

DEFAULT_AGENT_TIMEOUT = 3600.0
DEFAULT_VERIFY_TIMEOUT = 1800.0
PATCH_NOT_APPLIED = "patch_not_applied"  # AgentOutcome.exit_status: a submitted patch failed to apply
START_REF = "refs/agentcompass/start"  # what the harness started from; survives agent commits
SUBMISSION_PATH = "/tmp/agentcompass-submission.diff"
EVAL_SCRIPT_PATH = "/tmp/agentcompass-eval.sh"
# The order swebench.harness.run_evaluation tries (its GIT_APPLY_CMDS), on a pristine tree each time.
APPLY_COMMANDS = (
    "git apply --verbose",
    "git apply --verbose --3way",
    "git apply --verbose --reject",
    "patch --batch --forward --fuzz=5 -p1 -i",
)
EVAL_LOG_DETAIL_CAP = 20_000  # characters of eval log kept in trials.jsonl; eval.log has it whole
GIT_TIMEOUT = 600.0


class SwebenchFormat:
    def __init__(self, recipe: Recipe) -> None:
        self.recipe = recipe

    # -- loading -------------------------------------------------------------------------
    def rows(self) -> list[dict[str, Any]]:
        recipe = self.recipe
        if recipe.params.get("path") or recipe.source.get("path"):
            raw = read_rows_file(source_path(recipe))
        elif recipe.source.get("hf"):
            split = recipe.params.get("split") or recipe.source.get("split") or "test"
            raw = list(read_hf_dataset(str(recipe.source["hf"]), str(split)))
        else:
            raise UserError(f"benchmark '{recipe.name}' needs source.hf (a hub dataset) or a file: "
                            f"--benchmark-params '{{\"path\": \"rows.jsonl\"}}'")
        return [normalize_row(r) for r in raw]

    def load(self) -> list[Task]:
        tasks = select_tasks([self.make_task(row) for row in self.rows()], self.recipe.params)
        for task in tasks:
            check_gradable(task.data)
        return tasks

    def make_task(self, row: dict[str, Any]) -> Task:
        recipe = self.recipe
        workdir = recipe.workdir or "/testbed"
        fields = {k: v for k, v in row.items() if isinstance(v, str)}
        return Task(
            id=row["instance_id"],
            instruction=render_instruction(recipe, **fields, workdir=workdir),
            workdir=workdir,
            image=image_name(row, recipe.image),
            runs_on_host=recipe.runs_on_host,
            seed_dir=self.seed_dir(row["instance_id"]),
            env=dict(recipe.env),
            cpus=recipe.resources.cpus,
            memory_mb=recipe.resources.memory_mb,
            allow_internet=True if recipe.allow_internet is None else recipe.allow_internet,
            agent_timeout_s=recipe.timeouts.agent or DEFAULT_AGENT_TIMEOUT,
            verify_timeout_s=recipe.timeouts.verify or DEFAULT_VERIFY_TIMEOUT,
            build_timeout_s=recipe.timeouts.build,
            data=row,
        )

    def seed_dir(self, instance_id: str) -> Path | None:
        """`repos_dir/<instance_id>`: a checkout copied to /testbed where no image is used (local)."""
        if not (self.recipe.params.get("repos_dir") or self.recipe.source.get("repos_dir")):
            return None
        checkout = source_path(self.recipe, "repos_dir") / instance_id
        return checkout if checkout.is_dir() else None

    # -- trial phases --------------------------------------------------------------------
    def stage(self, task: Task, sandbox: "Sandbox", trial: "TrialContext") -> None:
        if task.seed_dir is not None and not getattr(sandbox, "has_task_image", False):
            sandbox.upload(task.seed_dir, task.workdir)
        result = sandbox.exec(f"git config --global --add safe.directory '*'; git update-ref {START_REF} HEAD",
                              timeout=GIT_TIMEOUT)
        if not result.ok:
            raise InfraError(f"no git repository at {task.workdir} in the sandbox: {last_line(result.stderr)}")

    def solve(self, task: Task, sandbox: "Sandbox", trial: "TrialContext") -> AgentOutcome:
        """The oracle: the instance's gold patch."""
        return self.apply_patch(task, sandbox, trial, str(task.data.get("patch") or ""))

    def apply_patch(self, task: Task, sandbox: "Sandbox", trial: "TrialContext", patch: str) -> AgentOutcome:
        """Apply a submitted patch as the official harness does; one that does not apply is reported, not raised."""
        if not patch.strip():
            return AgentOutcome(exit_status="completed", submission=patch)
        sandbox.upload(trial.write("submission.diff", patch), SUBMISSION_PATH)
        first_error = ""
        for attempt, command in enumerate(APPLY_COMMANDS):
            if attempt:  # a failed try (--reject above all) leaves partial changes behind
                sandbox.exec("git checkout -- . ; git clean -fdq", timeout=GIT_TIMEOUT)
            result = sandbox.exec(f"{command} {SUBMISSION_PATH}", timeout=GIT_TIMEOUT)
            output = result.stdout + result.stderr
            trial.append("agent.log", f"$ {command} {SUBMISSION_PATH}\n{output}\n")
            first_error = first_error or last_line(result.stderr or output)
            if result.ok:
                return AgentOutcome(exit_status="completed", submission=patch)
        if sandbox.exec(f"git apply --check --reverse {SUBMISSION_PATH}", timeout=GIT_TIMEOUT).ok:
            return AgentOutcome(exit_status="completed", submission=patch)  # already applied
        return AgentOutcome(exit_status=PATCH_NOT_APPLIED, submission=patch,
                            message=f"patch does not apply: {first_error}")

    def extract_patch(self, task: Task, sandbox: "Sandbox") -> str:
        """`git diff` of the workdir against the start, untracked files included, scratch excluded.

        A throwaway index keeps the repository's own index as the harness left it.
        """
        excludes = " ".join(shlex.quote(f":(exclude,glob){p}") for p in self.recipe.params.get("patch_exclude") or [])
        base = shlex.quote(str(task.data["base_commit"]))
        script = (
            f"base=$(git rev-parse -q --verify {START_REF} || echo {base}); "
            'index=$(mktemp); cp "$(git rev-parse --git-dir)/index" "$index" 2>/dev/null; '
            f'GIT_INDEX_FILE="$index" git add -A -- . {excludes} && '
            f'GIT_INDEX_FILE="$index" git diff --cached --no-color --no-ext-diff --binary "$base" -- . {excludes}; '
            'code=$?; rm -f "$index"; exit $code'
        )
        result = sandbox.exec(script, timeout=GIT_TIMEOUT)
        if not result.ok:
            raise InfraError(f"cannot diff {task.workdir}: {last_line(result.stderr)}")
        return result.stdout

    def grade(self, task: Task, sandbox: "Sandbox", trial: "TrialContext", outcome: AgentOutcome) -> Grade:
        if outcome.exit_status == PATCH_NOT_APPLIED:
            patch = outcome.submission or ""
            trial.write("patch.diff", patch)
            return self.unresolved(task, trial, patch, outcome.message)
        patch = self.extract_patch(task, sandbox)
        trial.write("patch.diff", patch)
        if not patch.strip():
            return self.unresolved(task, trial, patch, f"empty patch: no changes in {task.workdir}")
        return self.run_eval(task, sandbox, trial, patch)

    def run_eval(self, task: Task, sandbox: "Sandbox", trial: "TrialContext", patch: str) -> Grade:
        from swebench.harness.grading import get_eval_report
        from swebench.harness.utils import make_test_spec

        spec = make_test_spec(instance_for_test_spec(task.data, task.image or ""))
        sandbox.upload(trial.write("eval.sh", spec.eval_script), EVAL_SCRIPT_PATH)
        # One stream, as docker exec gives the official harness: the markers come from `set -x` on stderr.
        result = sandbox.exec(f"bash {EVAL_SCRIPT_PATH} 2>&1", timeout=task.verify_timeout_s)
        log = result.stdout + result.stderr
        log_path = trial.write("eval.log", log)
        if result.timed_out:
            return self.unresolved(task, trial, patch, f"tests timed out after {task.verify_timeout_s:.0f}s", log)
        prediction = {"instance_id": task.id, "model_name_or_path": model_name(trial), "model_patch": patch}
        report = get_eval_report(spec, prediction, str(log_path), include_tests_status=True)[task.id]
        if report.get("infra_failure"):
            raise InfraError(f"the eval environment failed ({report.get('infra_failure_reason')}); see eval.log")
        status = report.get("tests_status") or {}
        f2p = status.get("FAIL_TO_PASS") or {"success": [], "failure": []}
        p2p = status.get("PASS_TO_PASS") or {"success": [], "failure": []}
        resolved = bool(report["resolved"])
        if not report["patch_successfully_applied"]:
            message = "no test results in eval.log (the test patch or the test run failed)"
        else:
            message = (f"{'resolved' if resolved else 'not resolved'}: FAIL_TO_PASS {fraction_text(f2p)} passed, "
                       f"PASS_TO_PASS {fraction_text(p2p)} passed")
        return Grade(
            passed=resolved,
            reward=float(resolved),
            rewards={"fail_to_pass": fraction(f2p), "pass_to_pass": fraction(p2p)},
            message=message,
            details={**self.base_details(task, trial, patch, log), "resolved": resolved,
                     "tests_parsed": bool(report["patch_successfully_applied"]),
                     "FAIL_TO_PASS": f2p, "PASS_TO_PASS": p2p},
        )

    def unresolved(self, task: Task, trial: "TrialContext", patch: str, message: str, log: str = "") -> Grade:
        details = {**self.base_details(task, trial, patch, log), "resolved": False, "tests_parsed": False}
        return Grade(passed=False, reward=0.0, message=message, details=details)

    @staticmethod
    def base_details(task: Task, trial: "TrialContext", patch: str, log: str) -> dict[str, Any]:
        return {"instance_id": task.id, "model_name_or_path": model_name(trial), "patch": patch,
                "eval_log": log[-EVAL_LOG_DETAIL_CAP:]}

    # -- run artifacts -------------------------------------------------------------------
    def write_artifacts(self, run_dir: Path, results: list["TrialResult"]) -> None:
        """predictions.jsonl (attempt 1; later attempts in predictions-attempt-N.jsonl), from trials.jsonl."""
        by_attempt: dict[int, list[dict[str, Any]]] = {1: []}
        for result in sorted(results, key=lambda r: (r.attempt, r.task_id)):
            if "patch" in result.details:
                by_attempt.setdefault(result.attempt, []).append({
                    "instance_id": result.task_id,
                    "model_name_or_path": result.details.get("model_name_or_path") or "agentcompass",
                    "model_patch": result.details["patch"],
                })
        for attempt, predictions in by_attempt.items():
            name = "predictions.jsonl" if attempt == 1 else f"predictions-attempt-{attempt}.jsonl"
            write_atomic(run_dir / name, "".join(json.dumps(p) + "\n" for p in predictions))


def model_name(trial: "TrialContext") -> str:
    return trial.labels.get("model_name") or trial.labels.get("model") or "agentcompass"


def fraction(outcomes: dict[str, list[str]]) -> float:
    total = len(outcomes["success"]) + len(outcomes["failure"])
    return len(outcomes["success"]) / total if total else 1.0


def fraction_text(outcomes: dict[str, list[str]]) -> str:
    return f"{len(outcomes['success'])}/{len(outcomes['success']) + len(outcomes['failure'])}"


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"
