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
import urllib.request
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentcompass.core.errors import InfraError, UserError
from agentcompass.formats.base import SelectionParams, recipe_limits, render_instruction, select_tasks, source_path
from agentcompass.formats.swebench.classic import ClassicSpec
from agentcompass.formats.swebench.report import INSTANCE_REPORT, instance_report_text
from agentcompass.formats.swebench.data import (
    check_gradable,
    classic_eval_script,
    has_eval_script,
    image_name,
    normalize_row,
    read_hf_dataset,
    read_rows_file,
    instance_for_test_spec,
)
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
PATCH_NOT_APPLIED = "patch_not_applied"  # AgentOutcome.exit_status: a submitted patch failed to apply
START_REF = "refs/agentcompass/start"  # what the harness started from; survives agent commits
SUBMISSION_PATH = "/tmp/agentcompass-submission.diff"
PATCH_PATH = "/tmp/agentcompass-patch.diff"  # the tree's diff, fetched whole (an exec's output is capped)
EVAL_SCRIPT_PATH = "/tmp/agentcompass-eval.sh"
EVAL_LOG_PATH = "/tmp/agentcompass-eval.log"
ASSETS_DIR = "/image_assets"  # where the official harness stages image_assets
EVALUATION_MODES = ("fresh", "same")
OFFICIAL_MODAL_GRADING_VCPUS = 8.0  # run_evaluation_modal.py: Sandbox.create(..., cpu=4), 2 vCPUs a core
# The order swebench.harness.run_evaluation tries (its GIT_APPLY_CMDS), on a pristine tree each time.
APPLY_COMMANDS = (
    "git apply --verbose",
    "git apply --verbose --3way",
    "git apply --verbose --reject",
    "patch --batch --forward --fuzz=5 -p1 -i",
)
EVAL_LOG_DETAIL_CAP = 20_000  # characters of eval log kept in trials.jsonl; eval.log has it whole
GIT_TIMEOUT = 600.0


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
        if task.seed_dir is not None and not getattr(sandbox, "has_task_image", False):
            sandbox.upload(task.seed_dir, task.workdir)
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
        """The grading sandbox starts as the agent's did; grade applies the submission."""
        self.stage(task, sandbox, trial)

    def grade(self, task: Task, sandbox: "Sandbox", trial: "TrialContext", outcome: AgentOutcome) -> Grade:
        """Mode fresh: `sandbox` holds the starting state only and the submission is applied here;
        mode same: `sandbox` is the agent's and its tree diff is graded where it is."""
        mode = self.evaluation_mode()
        if outcome.exit_status == PATCH_NOT_APPLIED:
            patch = outcome.submission or ""
            trial.write("patch.diff", patch)
            return self.unresolved(task, trial, patch, mode, outcome.message)
        patch = (outcome.submission or "") if mode == "fresh" else self.extract_patch(task, sandbox)
        trial.write("patch.diff", patch)
        if not patch.strip():
            return self.unresolved(task, trial, patch, mode, f"empty patch: no changes in {task.workdir}")
        if mode == "fresh":
            applied = self.apply_patch(task, sandbox, trial, patch, log="verifier.log")
            if applied.exit_status == PATCH_NOT_APPLIED:
                return self.unresolved(task, trial, patch, mode, applied.message)
        return self.run_eval(task, sandbox, trial, patch, mode)

    def run_eval(self, task: Task, sandbox: "Sandbox", trial: "TrialContext", patch: str, mode: str) -> Grade:
        spec, script = self.eval_script(task, sandbox, trial)
        sandbox.upload(trial.write("eval.sh", script), EVAL_SCRIPT_PATH)
        # One stream, as docker exec gives the official harness (the markers come from `set -x` on stderr),
        # into a file fetched whole: an exec's output is capped, and the end of the log decides the verdict.
        result = sandbox.exec(f"bash {EVAL_SCRIPT_PATH} > {EVAL_LOG_PATH} 2>&1", timeout=task.verify_timeout_s)
        log = self.fetch_eval_log(sandbox, trial)
        return self.grade_log(task, trial, patch, mode, spec, log, result.timed_out)

    def eval_script(self, task: Task, sandbox: "Sandbox | None", trial: "TrialContext") -> tuple[Any, str]:
        """swebench's test spec of the instance and its eval script (image assets restored before the tests;
        they need a sandbox to stage them in)."""
        spec = test_spec(task.data, task.image or "")
        if sandbox is None:
            if any((spec.image_assets or {}).get(key) for key in ("test_patch", "patch")):
                raise UserError(f"{task.id} has image_assets, which eval on GCP Batch does not stage; "
                                "evaluate it with --env docker or modal")
            return spec, spec.eval_script
        return spec, inject_asset_restore(spec.eval_script, self.stage_image_assets(spec.image_assets, sandbox, trial))

    def grade_log(self, task: Task, trial: "TrialContext", patch: str, mode: str, spec: Any, log: str,
                  timed_out: bool) -> Grade:
        """The verdict on an eval log (written whole to eval.log first), by swebench's get_eval_report
        (4.1.0's rules for classic rows: formats/swebench/classic.py)."""
        if timed_out:  # the official harness notes it in the log the same way, then counts no result
            log += f"\n\nTimeout error: {task.verify_timeout_s:.0f} seconds exceeded."
            trial.write("eval.log", log)
            return self.unresolved(task, trial, patch, mode, f"tests timed out after {task.verify_timeout_s:.0f}s", log)
        prediction = {"instance_id": task.id, "model_name_or_path": model_name(trial), "model_patch": patch}
        official = eval_report(spec, prediction, trial.dir / "eval.log")
        trial.write(INSTANCE_REPORT, instance_report_text(official))  # as run_evaluation writes it
        report = official[task.id]
        status = report.get("tests_status") or {}
        f2p = status.get("FAIL_TO_PASS") or {"success": [], "failure": []}
        p2p = status.get("PASS_TO_PASS") or {"success": [], "failure": []}
        resolved = bool(report["resolved"])
        if not report["patch_successfully_applied"]:
            message = "no test results in eval.log (the test patch or the test run failed)"
            if report.get("infra_failure_reason"):  # advisory, as in swebench: the instance stays unresolved
                message += f"; likely cause: {report['infra_failure_reason']}"
        else:
            message = (f"{'resolved' if resolved else 'not resolved'}: FAIL_TO_PASS {fraction_text(f2p)} passed, "
                       f"PASS_TO_PASS {fraction_text(p2p)} passed")
        return Grade(
            passed=resolved,
            reward=float(resolved),
            rewards={"fail_to_pass": fraction(f2p), "pass_to_pass": fraction(p2p)},
            message=message,
            details={**self.base_details(task, trial, patch, mode, log), "resolved": resolved,
                     "tests_parsed": bool(report["patch_successfully_applied"]),
                     "infra_failure": bool(report.get("infra_failure")),
                     "infra_failure_reason": report.get("infra_failure_reason"),
                     "FAIL_TO_PASS": f2p, "PASS_TO_PASS": p2p, "official_report": official},
        )

    # -- grading on a batch backend (GCP Batch): formats/swebench/batch.py ------------------
    def batch_work(self, task: Task, patch: str, trial: "TrialContext") -> Any:
        from agentcompass.formats.swebench.batch import batch_work

        return batch_work(self, task, patch, trial)

    def batch_grade(self, task: Task, trial: "TrialContext", patch: str, outputs: Path | None) -> Grade:
        from agentcompass.formats.swebench.batch import batch_grade

        return batch_grade(self, task, trial, patch, outputs)

    def gold_patch(self, task: Task) -> str:
        return str(task.data.get("patch") or "")

    @staticmethod
    def fetch_eval_log(sandbox: "Sandbox", trial: "TrialContext") -> str:
        """eval.log as the official harness writes it: the whole output, decoded with replacement."""
        raw = trial.dir / ".eval.log.raw"
        try:
            sandbox.download(EVAL_LOG_PATH, raw)
            log = raw.read_bytes().decode("utf-8", errors="replace")
        except FileNotFoundError:
            log = ""
        finally:
            raw.unlink(missing_ok=True)
        trial.write("eval.log", log)
        return log

    @staticmethod
    def stage_image_assets(image_assets: dict[str, Any], sandbox: "Sandbox", trial: "TrialContext") -> list[str]:
        """Binary files a text patch cannot carry (SWE-bench Multimodal baselines), put in /image_assets
        and restored into the tree before the tests, as swebench 5.x run_evaluation does."""
        restore = []
        for key in ("test_patch", "patch"):
            for asset in (image_assets or {}).get(key) or []:
                if not asset.get("path") or not asset.get("url"):
                    continue  # the official harness skips an asset it has no source for
                flat = asset["path"].replace("/", "__")
                local = trial.dir / "image_assets" / flat
                local.parent.mkdir(parents=True, exist_ok=True)
                try:
                    with urllib.request.urlopen(asset["url"], timeout=60) as response:
                        local.write_bytes(response.read())
                except (OSError, ValueError) as exc:  # unreachable: infra, retried (the official harness skips it)
                    raise InfraError(f"cannot fetch image asset {asset['url']}: {exc}") from exc
                sandbox.upload(local, f"{ASSETS_DIR}/{flat}")
                restore.append(f"mkdir -p $(dirname {asset['path']}) && cp {ASSETS_DIR}/{flat} {asset['path']}")
        return restore

    def unresolved(self, task: Task, trial: "TrialContext", patch: str, mode: str, message: str, log: str = "") -> Grade:
        details = {**self.base_details(task, trial, patch, mode, log), "resolved": False, "tests_parsed": False}
        return Grade(passed=False, reward=0.0, message=message, details=details)

    @staticmethod
    def base_details(task: Task, trial: "TrialContext", patch: str, mode: str, log: str) -> dict[str, Any]:
        return {"instance_id": task.id, "model_name_or_path": model_name(trial), "patch": patch,
                "evaluation_mode": mode, "eval_log": log[-EVAL_LOG_DETAIL_CAP:]}

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


def test_spec(row: dict[str, Any], image: str) -> Any:
    """swebench 5.x's test spec of a 5.x row; for a classic row the spec 4.1.0 grades it by, with
    4.1.0's eval script as is (5.x's make_test_spec would add its exit-code line, which 4.1.0 lacks)."""
    if not has_eval_script(row):
        from agentcompass.formats.swebench.classic import END_TEST_OUTPUT, START_TEST_OUTPUT

        return ClassicSpec(instance_id=row["instance_id"], repo=row["repo"], FAIL_TO_PASS=row["FAIL_TO_PASS"],
                           PASS_TO_PASS=row["PASS_TO_PASS"],
                           eval_script=classic_eval_script(row, START_TEST_OUTPUT, END_TEST_OUTPUT))
    from swebench.harness.utils import make_test_spec

    return make_test_spec(instance_for_test_spec(row, image))


def eval_report(spec: Any, prediction: dict[str, Any], log: Path) -> dict[str, Any]:
    """The official per-instance report (report.json) of an eval log: 4.1.0's rules for a classic row's
    spec, swebench 5.x's get_eval_report for a 5.x row's."""
    if isinstance(spec, ClassicSpec):
        from agentcompass.formats.swebench.classic import get_eval_report
    else:
        from swebench.harness.grading import get_eval_report
    return get_eval_report(spec, prediction, str(log), include_tests_status=True)


def inject_asset_restore(eval_script: str, restore: list[str]) -> str:
    """The restore commands just before the test-output start marker (swebench 5.x _inject_asset_restore)."""
    from swebench.harness.constants import START_TEST_OUTPUT

    if not restore:
        return eval_script
    lines = eval_script.split("\n")
    for index, line in enumerate(lines):
        if START_TEST_OUTPUT in line:
            return "\n".join(lines[:index] + restore + lines[index:])
    return eval_script + "\n" + "\n".join(restore)


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
