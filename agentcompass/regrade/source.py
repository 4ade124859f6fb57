"""The finished run a regrade reads: its settings (run.json), its recorded attempts (trials.jsonl), and what each
attempt kept for grading again (core/kept_state.py), or why it cannot be graded again."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentcompass.core.errors import UserError
from agentcompass.core.kept_state import ARCHIVE_FILE, OUTCOME_FILE, STATE_FILE
from agentcompass.core.results import ResultsStore, TrialResult
from agentcompass.core.task import AgentOutcome


@dataclass
class Kept:
    """One attempt's kept state: the outcome the format graded, and the filesystem archive where it has one."""

    dir: Path
    outcome: AgentOutcome
    archive: Path | None
    why_no_archive: str
    recorded: TrialResult


@dataclass
class OriginalRun:
    dir: Path
    info: dict[str, Any]
    trials: dict[tuple[str, int], TrialResult]

    @classmethod
    def open(cls, run_dir: Path) -> "OriginalRun":
        """The run in `run_dir`; UserError (one line) when it is no finished run's folder."""
        run_json = run_dir / "run.json"
        if not run_json.is_file():
            raise UserError(f"{run_dir} is not a run directory (no run.json); pass a folder like "
                            f"results/<run name>/<benchmark>__<harness>__<model>__<env>")
        try:
            info = json.loads(run_json.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise UserError(f"{run_json} cannot be read ({exc}); regrade reads the run.json a run wrote") from exc
        if not isinstance(info, dict) or not isinstance(info.get("config"), dict):
            raise UserError(f"{run_json} records no run configuration; regrade reads the run.json a run wrote")
        trials = ResultsStore(run_dir).finished() if (run_dir / "trials.jsonl").is_file() else {}
        if not trials:
            raise UserError(f"{run_dir} has no recorded attempts (trials.jsonl): nothing to regrade")
        return cls(run_dir, info, trials)

    def task_ids(self) -> set[str]:
        return {task_id for task_id, _ in self.trials}

    def kept(self, task_id: str, attempt: int) -> Kept | str:
        """The attempt's kept state, or why it cannot be graded again (one line)."""
        recorded = self.trials.get((task_id, attempt))
        if recorded is None:
            return "the original run has no record of this attempt"
        folder = self.dir / "tasks" / task_id / f"attempt-{attempt}"
        outcome_file = folder / OUTCOME_FILE
        if not outcome_file.is_file():
            if recorded.status == "error":
                return f"the original attempt ended in an error before it was graded ({recorded.message[:160]})"
            return ("the original attempt kept nothing to grade again: its env keeps no sandbox state (modal, gcp), "
                    "run.kept_state_cap_mb was 0, or it was recorded before agentcompass kept state (docs/regrade.md)")
        try:
            outcome = AgentOutcome.model_validate_json(outcome_file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            return f"its kept outcome cannot be read: {exc}"
        archive = folder / ARCHIVE_FILE
        why = ""
        if not archive.is_file():
            try:
                state = json.loads((folder / STATE_FILE).read_text(encoding="utf-8"))
                why = str(state.get("reason") or "no archive was kept")
            except (OSError, ValueError):
                why = "no filesystem state was kept"
        return Kept(folder, outcome, archive if archive.is_file() else None, why, recorded)
