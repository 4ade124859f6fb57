"""The run report (report.json of a run) vs swebench's own make_run_report over the same instances:
resolved, unresolved, empty patches, errors (a patch that did not apply, a test timeout), an agent
error (the empty patch), an instance without a prediction; 5.0.2's failure reasons from the logs."""

from __future__ import annotations

import json

import pytest

from conformance.conftest import anchor_python, check_divergences, run_driver

from agentcompass.formats.swebench.report import run_report
from agentcompass.core.results import TrialResult

STAMP = "2026-12-01T00:00:00+00:00"
PATCH = "diff --git a/x b/x\n"


def entry(resolved: bool) -> dict:
    return {"patch_is_None": False, "patch_exists": True, "patch_successfully_applied": True, "resolved": resolved}


# instance -> (patch or None for no prediction, its report map or None for none, test_output or None)
INSTANCES = {
    "a__a-1": (PATCH, entry(True), "PASSED t\n"),
    "b__b-2": (PATCH, entry(False), "ModuleNotFoundError: No module named 'x'\n"),
    "c__c-3": ("", None, None),
    "d__d-4": (PATCH, None, None),  # the patch did not apply
    "e__e-5": (PATCH, None, "collected 2 items\n\nTimeout error: 1800 seconds exceeded."),
    "f__f-6": (None, None, None),  # no prediction
    "g__g-7": (PATCH, entry(False), "Error response from daemon: container gone\n"),
}


@pytest.mark.docker
@pytest.mark.parametrize("anchor,fivex", [("swebench 4.1.0", False), ("swebench 5.0.2", True)])
def test_run_report_is_make_run_reports(anchor, fivex, docker_engine, tmp_path, tally, allowed):
    dataset = [{"instance_id": i, "repo": "psf/requests", "version": "2.0", "base_commit": "0" * 40,
                "test_patch": "", "image": f"agentcompass-test/absent-{i}:latest"} for i in INSTANCES]
    predictions, logs, results = {}, {}, []
    for instance_id, (patch, report, output) in INSTANCES.items():
        if patch is None:
            continue
        predictions[instance_id] = {"instance_id": instance_id, "model_name_or_path": "org/model", "model_patch": patch}
        files = {}
        trial_dir = tmp_path / "run" / "tasks" / instance_id / "attempt-1"
        trial_dir.mkdir(parents=True)
        if report is not None:
            files["report.json"] = json.dumps({instance_id: report}, indent=4)
        if output is not None:
            files["test_output.txt"] = output
            (trial_dir / "eval.log").write_text(output)
        if patch:  # run_evaluation runs only non-empty patches
            logs[instance_id] = files
        details = {"patch": patch, "model_name_or_path": "org/model"}
        if report is not None:
            details["official_report"] = {instance_id: report}
        results.append(TrialResult(task_id=instance_id, attempt=1, status="failed", started_at=STAMP,
                                   finished_at=STAMP, details=details))
    official = run_driver(anchor_python(anchor), "swebench_official.py",
                          {"command": "run_report", "predictions": predictions, "dataset": dataset,
                           "run_id": "conformance", "logs": logs})
    ours = run_report(tmp_path / "run", list(INSTANCES), results, fivex)
    key = anchor.replace(" ", "-")
    found = {f"{key}/run-report": [] if json.dumps(ours) == json.dumps(official) else
             [f"official {json.dumps(official)} ours {json.dumps(ours)}"]}
    tally.record(anchor, "run reports", int(not found[f"{key}/run-report"]), 1)
    check_divergences(found, allowed)
