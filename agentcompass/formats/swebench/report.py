"""SWE-bench's own report files, from a run's trials: what run_evaluation writes, so tools made for it read ours.

- `tasks/<id>/attempt-<n>/report.json`: the instance's report, byte for byte as run_evaluation writes it
  (get_eval_report's map, indent 4), and only where it writes one: a non-empty patch that applied and
  whose tests ran to the end (no report after a patch that does not apply or a test timeout).
- `report.json` in the run directory: make_run_report's run report (total, submitted, completed,
  resolved, unresolved, empty-patch, error and incomplete instances and their ids), with 5.0.2's
  fields on 5.x rows (failure reasons classified from eval.log and verifier.log, as 5.0.2 classifies
  test_output.txt and run_instance.log). Later attempts get report-attempt-<n>.json.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentcompass.core.results import write_atomic

if TYPE_CHECKING:
    from agentcompass.core.results import TrialResult

INSTANCE_REPORT = "report.json"


def instance_report_text(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=4)


@functools.lru_cache(maxsize=None)
def classified(trial_dir: str) -> tuple[str, str] | None:
    """5.0.2's (reason, tier) for a finished attempt's logs; they no longer change, so read once per process
    (the run report is rewritten with every summary)."""
    from swebench.harness.infra_failure import classify_logs

    return classify_logs(Path(trial_dir) / "eval.log", Path(trial_dir) / "verifier.log")


def run_report(run_dir: Path, task_ids: list[str], results: list["TrialResult"], fivex: bool) -> dict[str, Any]:
    """make_run_report's fields over the selection (`task_ids`, its full_dataset) and one attempt's trials
    (its predictions: every attempted instance, an errored attempt submitting the empty patch)."""
    by_id = {r.task_id: r for r in results}
    completed, resolved, unresolved, errors, incomplete, empty = set(), set(), set(), set(), set(), set()
    infra, ambiguous, reasons = set(), set(), {}
    for task_id in task_ids:
        result = by_id.get(task_id)
        if result is None:
            incomplete.add(task_id)
            continue
        if result.details.get("patch") in ("", None):
            empty.add(task_id)
            continue
        report = (result.details.get("official_report") or {}).get(task_id)
        if report is None:
            errors.add(task_id)
            continue
        completed.add(task_id)
        (resolved if report.get("resolved") else unresolved).add(task_id)
    if fivex:  # 5.0.2 classifies why each unresolved or errored instance failed, from its logs
        from swebench.harness.infra_failure import TIER_ENVIRONMENT

        for task_id in unresolved | errors:
            found = classified(str(run_dir / "tasks" / task_id / f"attempt-{by_id[task_id].attempt}"))
            if found:
                reasons[task_id] = found[0]
                (infra if found[1] == TIER_ENVIRONMENT else ambiguous).add(task_id)
    out: dict[str, Any] = {
        "total_instances": len(task_ids),
        "submitted_instances": len(by_id),
        "completed_instances": len(completed),
        "resolved_instances": len(resolved),
        "unresolved_instances": len(unresolved),
    }
    if fivex:
        out |= {"infra_failure_instances": len(infra), "ambiguous_failure_instances": len(ambiguous)}
    out |= {
        "empty_patch_instances": len(empty),
        "error_instances": len(errors),
        "completed_ids": sorted(completed),
        "incomplete_ids": sorted(incomplete),
        "empty_patch_ids": sorted(empty),
        "submitted_ids": sorted(by_id),
        "resolved_ids": sorted(resolved),
        "unresolved_ids": sorted(unresolved),
    }
    if fivex:
        out |= {"infra_failure_ids": sorted(infra), "ambiguous_failure_ids": sorted(ambiguous),
                "failure_reasons": dict(sorted(reasons.items()))}
    out |= {"error_ids": sorted(errors), "schema_version": 2}
    if fivex:  # what 5.0.2's CLI adds from the Docker engine: every sandbox is closed and no image kept for it
        out |= {"unstopped_instances": 0, "unstopped_containers": [], "unremoved_images": []}
    return out


def write_run_reports(run_dir: Path, task_ids: list[str], results: list["TrialResult"], fivex: bool) -> None:
    attempts = sorted({r.attempt for r in results} | {1})
    for attempt in attempts:
        name = "report.json" if attempt == 1 else f"report-attempt-{attempt}.json"
        report = run_report(run_dir, task_ids, [r for r in results if r.attempt == attempt], fivex)
        write_atomic(run_dir / name, json.dumps(report, indent=4) + "\n")
