"""SWE-bench Pro task format: SWE-bench's flow (the repository in the instance image, the agent's tree diff as the
submission, graded in a fresh sandbox of the image), graded by Pro's own rules: each instance's run script and
parser from Scale AI's repository, run by the entry script its evaluation composes (formats/swebench_pro/scripts.py).

Rows come from the hub (`ScaleAI/SWE-bench_Pro`, split test: the 731 public instances) or a .jsonl/.json file; the
grading material from `source.scripts` (a git URL and ref, cloned once into the cache, or a local checkout). The
images are the official ones by name (`<image_user>/sweap-images:<tag>`, tag as Pro's image_uri helper makes it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentcompass.core.errors import UserError
from agentcompass.core.safe_files import download_checked
from agentcompass.core.task import AgentOutcome, Grade, Task
from agentcompass.formats.base import recipe_limits, render_instruction, select_tasks
from agentcompass.formats.swebench.constants import PATCH_NOT_APPLIED
from agentcompass.formats.swebench.data import read_hf_dataset, read_rows_file
from agentcompass.formats.swebench.format import SwebenchFormat, SwebenchParams
from agentcompass.formats.swebench.grading import base_details, unresolved
from agentcompass.formats.swebench_pro.scripts import (FILES, WORKSPACE, as_list, entry_script, image_uri,
                                                      instance_files, resolved, without_binary_hunks)

if TYPE_CHECKING:
    from agentcompass.core.context import TrialContext
    from agentcompass.core.results import TrialResult
    from agentcompass.core.sandbox import Sandbox

DEFAULT_AGENT_TIMEOUT = 3600.0
DEFAULT_VERIFY_TIMEOUT = 3600.0  # the official sandbox's timeout (60 minutes)
REQUIRED = ("instance_id", "repo", "base_commit", "problem_statement", "fail_to_pass", "pass_to_pass",
            "selected_test_files_to_run")
LISTS = ("fail_to_pass", "pass_to_pass", "selected_test_files_to_run")


def image_of(row: dict[str, Any], user: str) -> str:
    """The row's own image, else the official one: its `dockerhub_tag` column, else the tag made from its id."""
    if row.get("image"):
        return str(row["image"])
    if row.get("dockerhub_tag"):
        return f"{user}/sweap-images:{row['dockerhub_tag']}"
    return image_uri(row["instance_id"], row["repo"], user)


class SwebenchProParams(SwebenchParams):
    path_keys = ("path", "repos_dir", "scripts_dir")
    scripts_dir: str | None = None  # a local SWE-bench_Pro-os checkout instead of source.scripts
    image_user: str | None = None  # the Docker Hub account of the sweap-images repository (default source.image_user)


class SwebenchProFormat(SwebenchFormat):
    Params = SwebenchProParams

    def __init__(self, recipe: Any) -> None:
        super().__init__(recipe)
        self._scripts: Path | None = None

    # -- loading -------------------------------------------------------------------------
    def rows(self) -> list[dict[str, Any]]:
        recipe = self.recipe
        if recipe.params.get("path") or recipe.source.get("path"):
            from agentcompass.formats.base import source_path

            raw = read_rows_file(source_path(recipe))
        elif recipe.source.get("hf"):
            raw = list(read_hf_dataset(str(recipe.source["hf"]), str(recipe.params.get("split") or
                                                                    recipe.source.get("split") or "test")))
        else:
            raise UserError(f"benchmark '{recipe.name}' needs source.hf (ScaleAI/SWE-bench_Pro) or a rows file: "
                            "--benchmark-params '{\"path\": \"rows.jsonl\"}'")
        return [self.normalize(r) for r in raw]

    @staticmethod
    def normalize(row: dict[str, Any]) -> dict[str, Any]:
        lowered = {k.lower() if k in ("FAIL_TO_PASS", "PASS_TO_PASS") else k: v for k, v in row.items()}
        missing = [k for k in REQUIRED if k not in lowered]
        if missing:
            raise UserError(f"SWE-bench Pro row {row.get('instance_id', '?')} lacks {', '.join(missing)}; "
                            f"rows need {', '.join(REQUIRED)}")
        out = {k: ("" if v is None else v) for k, v in lowered.items()}
        out["instance_id"] = str(out["instance_id"])
        for field in LISTS:
            out[field] = as_list(out[field], field, out["instance_id"])
        return out

    def scripts_root(self) -> Path:
        """The SWE-bench_Pro-os checkout holding run_scripts/ and dockerfiles/."""
        if self._scripts is None:
            recipe = self.recipe
            if recipe.params.get("scripts_dir"):
                from agentcompass.formats.base import source_path

                self._scripts = source_path(recipe, "scripts_dir")
            elif isinstance(recipe.source.get("scripts"), dict) and recipe.source["scripts"].get("git"):
                from agentcompass.formats.sources.git import git_checkout

                scripts = recipe.source["scripts"]
                self._scripts = git_checkout(str(scripts["git"]), str(scripts.get("ref") or "HEAD"))
            else:
                raise UserError(f"benchmark '{recipe.name}' needs source.scripts {{git: URL, ref: COMMIT}} (Scale AI's "
                                "SWE-bench_Pro-os) or --benchmark-params '{\"scripts_dir\": \"DIR\"}'")
        return self._scripts

    def load(self) -> list[Task]:
        tasks = select_tasks([self.make_task(row) for row in self.rows()], self.recipe.params, self.recipe.name)
        for task in tasks:  # every selected instance's grading material is there, before any agent runs
            instance_files(self.scripts_root(), task.id)
        self.fivex_rows = {}
        return tasks

    def make_task(self, row: dict[str, Any]) -> Task:
        recipe = self.recipe
        workdir = recipe.workdir or "/app"
        user = str(recipe.params.get("image_user") or recipe.source.get("image_user") or "jefzda")
        fields = {k: v for k, v in row.items() if isinstance(v, str)}
        return Task(id=row["instance_id"], instruction=render_instruction(recipe, **fields, workdir=workdir),
                    workdir=workdir, image=image_of(row, user),
                    runs_on_host=recipe.runs_on_host, seed_dir=self.seed_dir(row["instance_id"]),
                    **recipe_limits(recipe, DEFAULT_AGENT_TIMEOUT, DEFAULT_VERIFY_TIMEOUT), data=row)

    # -- grading: the official entry script, the patch applied by it alone -------------------
    def grade(self, task: Task, sandbox: "Sandbox", trial: "TrialContext", outcome: AgentOutcome) -> Grade:
        mode = self.evaluation_mode()
        patch = (outcome.submission or "") if mode == "fresh" else self.extract_patch(task, sandbox)
        trial.write("patch.diff", patch)
        if outcome.exit_status == PATCH_NOT_APPLIED:
            return unresolved(task, trial, patch, mode, outcome.message)
        if not patch.strip():
            return unresolved(task, trial, patch, mode, f"empty patch: no changes in {task.workdir}")
        return self.run_eval(task, sandbox, trial, patch, mode)

    def run_eval(self, task: Task, sandbox: "Sandbox", trial: "TrialContext", patch: str, mode: str) -> Grade:
        files = instance_files(self.scripts_root(), task.id)
        script = entry_script(task.data, files, task.workdir)
        contents = {"patch.diff": without_binary_hunks(patch), "run_script.sh": files["run_script.sh"],
                    "parser.py": files["parser.py"], "entryscript.sh": script}
        sandbox.exec(f"mkdir -p {WORKSPACE}", timeout=60)
        for name in FILES:
            sandbox.upload(trial.write(f"pro/{name}", contents[name]), f"{WORKSPACE}/{name}")
        result = sandbox.exec(f"bash {WORKSPACE}/entryscript.sh", timeout=task.verify_timeout_s)
        logs = {name: self.fetch(sandbox, trial, name) for name in ("stdout.log", "stderr.log", "output.json")}
        try:
            output = json.loads(logs["output.json"]) if logs["output.json"] else None
        except ValueError:
            output = None
        passed, report = resolved(task.data, output)
        if result.timed_out:
            message = f"the tests ran past the verifier's {task.verify_timeout_s:.0f} s"
        elif output is None:
            message = "no output.json: the run script or the parser failed (see pro/stdout.log, pro/stderr.log)"
        else:
            message = "" if passed else f"{sum(map(len, (report['FAIL_TO_PASS_failed'], report['PASS_TO_PASS_failed'])))} required test(s) did not pass"
        details = {**base_details(task, trial, patch, mode, logs["stdout.log"]), "resolved": passed,
                   "tests_parsed": output is not None, **report}
        return Grade(passed=passed, reward=1.0 if passed else 0.0, message=message, details=details)

    @staticmethod
    def fetch(sandbox: "Sandbox", trial: "TrialContext", name: str) -> str:
        local = trial.dir / "pro" / name
        try:
            download_checked(sandbox, f"{WORKSPACE}/{name}", local, trial)  # a link planted there: tampering
        except FileNotFoundError:
            return ""
        return local.read_bytes().decode("utf-8", errors="replace")

    batch_work = None  # type: ignore[assignment]  # graded in sandboxes only: no GCP Batch path for Pro yet

    def write_artifacts(self, run_dir: Path, results: list["TrialResult"], task_ids: list[str] | None = None,
                        model_name: str | None = None) -> None:
        """The patches in the official evaluation's input shape (patches.json: instance_id, patch, prefix) and
        its output's (eval_results.json: instance_id -> resolved), attempt 1."""
        from agentcompass.core.results import write_atomic

        first = sorted((r for r in results if r.attempt == 1), key=lambda r: r.task_id)
        patches = [{"instance_id": r.task_id, "patch": r.details.get("patch", ""), "prefix": ""} for r in first]
        write_atomic(run_dir / "patches.json", json.dumps(patches, indent=1) + "\n")
        write_atomic(run_dir / "eval_results.json",
                     json.dumps({r.task_id: bool(r.details.get("resolved")) for r in first}, indent=1) + "\n")
