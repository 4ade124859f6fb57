"""SWE-bench task format: one GitHub issue per task, graded by swebench's own eval script and log parsers.

A trial's sandbox holds the repository at /testbed (the instance image, or a seeded checkout
where no image is used). After the harness, the submission is the harness's own patch, else the
diff of /testbed against the commit it started from, new files included. With evaluation_mode
fresh (the default, as the official harness) the agent's sandbox is closed and the submission is
applied in a new sandbox of the instance image; with `same` the tree is graded where the agent
left it. The instance's eval script then applies the test patch and runs the tests, its output is
fetched whole, and swebench's `get_eval_report` grades it. Every run also writes
predictions.jsonl (the patches graded), which the official harness and sb-cli accept."""

from __future__ import annotations

import json
import shlex
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentcompass.core.errors import InfraError, UserError
from agentcompass.formats.base import SelectionParams, recipe_limits, render_instruction, select_tasks, source_path
from agentcompass.formats.git_history import scrub_future_history
from agentcompass.formats.swebench.batch import BatchWork, batch_grade, batch_work
from agentcompass.formats.swebench.constants import (
    APPLY_COMMANDS,
    EVAL_LOG_PATH,
    EVAL_SCRIPT_PATH,
    GIT_TIMEOUT,
    PATCH_NOT_APPLIED,
    PATCH_PATH,
    START_REF,
    SUBMISSION_PATH,
    last_line,
)
from agentcompass.formats.swebench.data import (
    check_gradable,
    has_eval_script,
    image_name,
    normalize_row,
    read_hf_dataset,
    read_rows_file,
)
from agentcompass.formats.swebench.grading import eval_script, fetch_eval_log, grade_log, unresolved
from agentcompass.core.results import write_atomic
from agentcompass.core.sandbox import read_whole
from agentcompass.core.schema import Recipe
from agentcompass.core.task import AgentOutcome, Grade, Task

if TYPE_CHECKING:
    from agentcompass.core.results import TrialResult
    from agentcompass.core.sandbox import Sandbox, SandboxSpec
    from agentcompass.core.context import TrialContext

DEFAULT_AGENT_TIMEOUT = 3600.0
DEFAULT_VERIFY_TIMEOUT = 1800.0
EVALUATION_MODES = ("fresh", "same")
OFFICIAL_MODAL_GRADING_VCPUS = 8.0  # run_evaluation_modal.py: Sandbox.create(..., cpu=4), 2 vCPUs a core


class SwebenchParams(SelectionParams):
    path_keys = ("path", "repos_dir")
    split: str | None = None  # default source.split
    repos_dir: str | None = None  # <repos_dir>/<instance_id>: a checkout staged at /testbed where no image is used
    patch_exclude: list[str] = []  # git pathspec globs (relative to /testbed) left out of the patch
    evaluation_mode: str = "fresh"  # fresh: the submission alone in a new sandbox; same: the agent's


class SwebenchFormat:
    extra, extra_modules = "swebench", ("swebench", "datasets")  # checked before a run (registry.check_extra)
    Params = SwebenchParams
    def __init__(self, recipe: Recipe) -> None:
        self.recipe = recipe
        self.fivex_rows: dict[str, bool] | None = None

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
        self.evaluation_mode()  # a bad mode is bad input, refused before the run
        tasks = select_tasks([self.make_task(row) for row in self.rows()], self.recipe.params, self.recipe.name)
        for task in tasks:
            check_gradable(task.data)
        self.fivex_rows = {task.id: has_eval_script(task.data) for task in tasks}  # the run report's shape
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
            **recipe_limits(recipe, DEFAULT_AGENT_TIMEOUT, DEFAULT_VERIFY_TIMEOUT),
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
        """The checkout as the instance's image holds it, its history beyond HEAD removed before the agent starts
        (as SWE-bench's newer images are built: formats/git_history.py), and the start recorded for the diff."""
        self.checkout(task, sandbox)
        self.mark_start(task, sandbox)  # first: it also lets git read a repository another user owns
        scrub_future_history(sandbox, str(task.data.get("base_commit") or ""))

    def checkout(self, task: Task, sandbox: "Sandbox") -> None:
        if task.seed_dir is not None and not getattr(sandbox, "has_task_image", False):
            sandbox.upload(task.seed_dir, task.workdir)

    def mark_start(self, task: Task, sandbox: "Sandbox") -> None:
        result = sandbox.exec(f"git config --global --add safe.directory '*'; git update-ref {START_REF} HEAD",
                              timeout=GIT_TIMEOUT)
        if not result.ok:
            raise InfraError(f"no git repository at {task.workdir} in the sandbox: {last_line(result.stderr)}")

    def solve(self, task: Task, sandbox: "Sandbox", trial: "TrialContext") -> AgentOutcome:
        """The oracle: the instance's gold patch."""
        return self.apply_patch(task, sandbox, trial, self.gold_patch(task))

    def apply_patch(self, task: Task, sandbox: "Sandbox", trial: "TrialContext", patch: str,
                    log: str = "agent.log") -> AgentOutcome:
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
            trial.append(log, f"$ {command} {SUBMISSION_PATH}\n{output}\n")
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
            f'GIT_INDEX_FILE="$index" git diff --cached --no-color --no-ext-diff --binary "$base" -- . {excludes} '
            f'> {PATCH_PATH}; code=$?; rm -f "$index"; exit $code'
        )
        result = sandbox.exec(script, timeout=GIT_TIMEOUT)
        if not result.ok:
            raise InfraError(f"cannot diff {task.workdir}: {last_line(result.stderr)}")
        return read_whole(sandbox, PATCH_PATH)

    # -- grading -----------------------------------------------------------------------
    def evaluation_mode(self) -> str:
        """`fresh` (the official harness's way): the submission alone, applied in a new sandbox of the
        instance image; `same`: the agent's sandbox as it was left, its tree diff as the patch (faster)."""
        mode = self.recipe.params.get("evaluation_mode") or "fresh"
        if mode not in EVALUATION_MODES:
            raise UserError(f"benchmark param 'evaluation_mode' must be one of {', '.join(EVALUATION_MODES)}, "
                            f"got {mode!r}; 'fresh' grades as the official harness does")
        return str(mode)

    def grading_spec(self, task: Task, spec: "SandboxSpec") -> "SandboxSpec | None":
        """The sandbox a submission is graded in (mode fresh): a new one of the instance image without the
        recipe's resource limits, which the official evaluation container does not have either."""
        if self.evaluation_mode() != "fresh":
            return None
        # cpu_request: swebench's modal_eval creates its sandbox with cpu=4 (Modal cores, 8 vCPUs), a request
        # without a limit; docker's official containers have no limits at all (docker ignores a request).
        return replace(spec, name=f"{spec.name[:114]}-grade", cpus=None, memory_mb=None,
                       cpu_request=OFFICIAL_MODAL_GRADING_VCPUS, labels={**spec.labels, "phase": "grade"})

    def collect(self, task: Task, sandbox: "Sandbox", trial: "TrialContext", outcome: AgentOutcome) -> AgentOutcome:
        """In the agent's sandbox before it closes: the harness's own submission ("" when it submitted
        nothing), else the tree diff against where the agent started."""
        if outcome.submission is not None:
            return outcome
        return outcome.model_copy(update={"submission": self.extract_patch(task, sandbox)})

    def stage_grading(self, task: Task, sandbox: "Sandbox", trial: "TrialContext") -> None:
        """The grading sandbox starts from the instance's checkout (no agent runs here, so its history is left as
        the image has it, as the official harness grades); grade applies the submission."""
        self.checkout(task, sandbox)
        self.mark_start(task, sandbox)

    def grade(self, task: Task, sandbox: "Sandbox", trial: "TrialContext", outcome: AgentOutcome) -> Grade:
        """Mode fresh: `sandbox` holds the starting state only and the submission is applied here;
        mode same: `sandbox` is the agent's and its tree diff is graded where it is."""
        mode = self.evaluation_mode()
        if outcome.exit_status == PATCH_NOT_APPLIED:
            patch = outcome.submission or ""
            trial.write("patch.diff", patch)
            return unresolved(task, trial, patch, mode, outcome.message)
        patch = (outcome.submission or "") if mode == "fresh" else self.extract_patch(task, sandbox)
        trial.write("patch.diff", patch)
        if not patch.strip():
            return unresolved(task, trial, patch, mode, f"empty patch: no changes in {task.workdir}")
        if mode == "fresh":
            applied = self.apply_patch(task, sandbox, trial, patch, log="verifier.log")
            if applied.exit_status == PATCH_NOT_APPLIED:
                return unresolved(task, trial, patch, mode, applied.message)
        return self.run_eval(task, sandbox, trial, patch, mode)

    def run_eval(self, task: Task, sandbox: "Sandbox", trial: "TrialContext", patch: str, mode: str) -> Grade:
        spec, script = eval_script(task, sandbox, trial)
        sandbox.upload(trial.write("eval.sh", script), EVAL_SCRIPT_PATH)
        # One stream, as docker exec gives the official harness (the markers come from `set -x` on stderr),
        # into a file fetched whole: an exec's output is capped, and the end of the log decides the verdict.
        result = sandbox.exec(f"bash {EVAL_SCRIPT_PATH} > {EVAL_LOG_PATH} 2>&1", timeout=task.verify_timeout_s)
        log = fetch_eval_log(sandbox, trial)
        return grade_log(task, trial, patch, mode, spec, log, result.timed_out)

    # -- grading on a batch backend (GCP Batch): formats/swebench/batch.py ------------------
    def batch_work(self, task: Task, patch: str, trial: "TrialContext") -> BatchWork | None:
        return batch_work(task, patch, trial)

    def batch_grade(self, task: Task, trial: "TrialContext", patch: str, outputs: Path | None) -> Grade:
        return batch_grade(task, trial, patch, outputs)

    def gold_patch(self, task: Task) -> str:
        return str(task.data.get("patch") or "")

    # -- run artifacts -------------------------------------------------------------------
    def write_artifacts(self, run_dir: Path, results: list["TrialResult"], task_ids: list[str] | None = None,
                        model_name: str | None = None) -> None:
        """predictions.jsonl (attempt 1; later attempts in predictions-attempt-N.jsonl) and the official run
        report (report.json, formats/swebench/report.py), from trials.jsonl."""
        from agentcompass.formats.swebench.report import write_run_reports

        by_attempt: dict[int, list[dict[str, Any]]] = {1: []}
        model = model_name or next((r.details["model_name_or_path"] for r in results
                                    if r.details.get("model_name_or_path")), "agentcompass")
        for result in sorted(results, key=lambda r: (r.attempt, r.task_id)):
            # A line per attempted instance, as mini-swe-agent's preds.json: an attempt that ended in an
            # error graded nothing and submits the empty patch.
            by_attempt.setdefault(result.attempt, []).append({
                "instance_id": result.task_id,
                "model_name_or_path": result.details.get("model_name_or_path") or model,
                "model_patch": result.details.get("patch", ""),
            })
        for attempt, predictions in by_attempt.items():
            name = "predictions.jsonl" if attempt == 1 else f"predictions-attempt-{attempt}.jsonl"
            write_atomic(run_dir / name, "".join(json.dumps(p) + "\n" for p in predictions))
        if task_ids is not None:
            if self.fivex_rows is None:  # not loaded in this process (a summary rebuilt from trials.jsonl)
                self.fivex_rows = {row["instance_id"]: has_eval_script(row) for row in self.rows()}
            fivex = any(self.fivex_rows.get(task_id) for task_id in task_ids)
            write_run_reports(run_dir, task_ids, results, fivex)
