"""predictions: submits each task's patch from a predictions file; the harness behind `agentcompass eval`.

A predictions file is what SWE-bench's harness and sb-cli read: a .jsonl file, a .json list,
or a .json object keyed by instance_id, each prediction with instance_id, model_name_or_path
and model_patch.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentcompass.core.errors import AgentError, UserError
from agentcompass.core.schema import Strict
from agentcompass.core.task import AgentOutcome, Task

if TYPE_CHECKING:
    from agentcompass.core.contracts import TaskFormat
    from agentcompass.core.sandbox import Sandbox
    from agentcompass.core.schema import ModelConfig
    from agentcompass.core.context import TrialContext


def read_predictions(path: Path) -> dict[str, dict[str, Any]]:
    """instance_id -> prediction, from a .jsonl file, a .json list or a .json object keyed by instance_id."""
    try:
        with path.open(encoding="utf-8") as lines:
            # A .jsonl file's lines as swebench's get_predictions_from_file reads them (\n, \r\n or \r ends a
            # line; str.splitlines would also split inside a patch at U+2028 or U+0085). Blank lines are
            # skipped, where swebench fails (docs/deliberate-differences.md).
            if path.suffix == ".jsonl":
                rows: Any = [json.loads(line) for line in lines if line.strip()]
            else:
                rows = json.load(lines)
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read predictions from {path}: {exc}; pass a .jsonl file or a .json list or object") from exc
    if isinstance(rows, dict):
        rows = [{"instance_id": key, **value} if isinstance(value, dict) else value for key, value in rows.items()]
    if not isinstance(rows, list) or not all(isinstance(r, dict) and r.get("instance_id") for r in rows):
        raise UserError(f"{path}: every prediction must be an object with instance_id, model_name_or_path, model_patch")
    return {str(r["instance_id"]): r for r in rows}


class PredictionsHarness:
    needs_model = False
    # No agent works in the sandbox, so with fresh grading it is the grading sandbox itself (trial.py).
    submits_only = True

    class Settings(Strict):
        predictions: str | None = None

    def __init__(self, predictions: str | None = None, **_: Any) -> None:
        if not predictions:
            raise UserError("harness 'predictions' needs a file: agentcompass eval BENCHMARK --predictions FILE")
        self.predictions = read_predictions(Path(predictions))

    def check_tasks(self, tasks: list[Task]) -> None:
        """Refuse a file with no prediction for the selected instances; note the ones it has outside them."""
        selected = {t.id for t in tasks}
        outside = [i for i in self.predictions if i not in selected]
        if len(outside) == len(self.predictions):
            raise UserError(f"no prediction is for an instance of the benchmark's selection (e.g. {outside[0]}); "
                            f"check the benchmark, its split and --benchmark-params")
        if outside:
            print(f"note: {len(outside)} predictions are for instances outside the selection and are not graded "
                  f"(e.g. {outside[0]})", file=sys.stderr)

    def attempts(self, task: Task) -> bool:
        """Only instances with a prediction are run; the others stay unattempted, hence unresolved."""
        return task.id in self.predictions

    def submission(self, task: Task, task_format: "TaskFormat") -> str:
        """The patch graded for `task`, without a sandbox (eval on GCP Batch)."""
        return str((self.predictions.get(task.id) or {}).get("model_patch") or "")

    def run(
        self, task: Task, sandbox: "Sandbox", model: "ModelConfig", trial: "TrialContext", task_format: "TaskFormat"
    ) -> AgentOutcome:
        prediction = self.predictions.get(task.id)
        if prediction is None:
            raise AgentError(f"the predictions file has no prediction for {task.id}")
        apply_patch = getattr(task_format, "apply_patch", None)
        if apply_patch is None:
            raise AgentError(f"the '{type(task_format).__name__}' format does not grade patches; use a SWE-bench benchmark")
        trial.write("agent.log", f"prediction by {prediction.get('model_name_or_path')}\n")
        patch = str(prediction.get("model_patch") or "")
        if task_format.evaluation_mode() == "fresh":
            return AgentOutcome(exit_status="completed", submission=patch)  # graded byte for byte as given
        return apply_patch(task, sandbox, trial, patch)
