"""`agentcompass eval` vs swebench 5.0.2's own `run_evaluation` on docker, on the same predictions for
instances of one locally built image (a repository with a CRLF file): a resolving patch, an unresolving
one, an empty one and one that does not apply. Compared: each instance's report.json and the run report."""

from __future__ import annotations

import json
import subprocess

import pytest

from conformance.conftest import anchor_python, check_divergences, DRIVERS
from conftest import run_cli
from testbed_image import build_testbed_image

ANCHOR = "swebench 5.0.2"
MODEL = "org/model"
# The markers are xtrace lines (stderr) and the results echo lines (stdout): Docker reads the two pipes
# apart, so their order in the log is a race (a result before the start marker is not graded). One
# stream keeps the order as written, as a real test run's seconds between marker and output do.
EVAL = ("#!/bin/bash\nset -uxo pipefail\nexec 2>&1\ncd /testbed\n: '>>>>> Start Test Output'\n"
        "if grep -q '^c' win.txt; then echo 'PASSED t.py::test_fix'; else echo 'FAILED t.py::test_fix'; fi\n"
        "echo 'PASSED t.py::test_keep'\n: '>>>>> End Test Output'\n")
FIX = "diff --git a/win.txt b/win.txt\n--- a/win.txt\n+++ b/win.txt\n@@ -1,2 +1,2 @@\n a\r\n-b\r\n+c\r\n"
OTHER = "diff --git a/new.txt b/new.txt\nnew file mode 100644\n--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1 @@\n+x\n"
BROKEN = "diff --git a/win.txt b/win.txt\n--- a/win.txt\n+++ b/win.txt\n@@ -1,2 +1,2 @@\n zzz\n-yyy\n+c\n"
PATCHES = {"conf__crlf-1": FIX, "conf__crlf-2": OTHER, "conf__crlf-3": "", "conf__crlf-4": BROKEN}


@pytest.mark.docker
def test_eval_writes_the_reports_run_evaluation_writes(base_image, tmp_path, tally, allowed, tmp_path_factory):
    image, commit = build_testbed_image(base_image, tmp_path_factory.mktemp("crlf-eval"),
                                        {"win.txt": b"a\r\nb\r\n"}, "swebench-crlf")
    rows = [{"instance_id": i, "repo": "conf/crlf", "version": "0.1", "base_commit": commit, "patch": FIX,
             "test_patch": "", "problem_statement": "", "hints_text": "", "created_at": "",
             "FAIL_TO_PASS": json.dumps(["t.py::test_fix"]), "PASS_TO_PASS": json.dumps(["t.py::test_keep"]),
             "environment_setup_commit": commit, "image": image, "eval_script": EVAL,
             "log_parser": "parse_log_pytest", "eval_type": "pass_and_fail"} for i in PATCHES]
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    (tmp_path / "preds.jsonl").write_text("".join(
        json.dumps({"instance_id": i, "model_name_or_path": MODEL, "model_patch": p}) + "\n" for i, p in PATCHES.items()))
    official_dir = tmp_path / "official"
    official_dir.mkdir()
    done = subprocess.run([str(anchor_python(ANCHOR)), str(DRIVERS / "swebench_run_evaluation.py"),
                           "--dataset_name", str(tmp_path / "rows.json"), "--predictions_path", str(tmp_path / "preds.jsonl"),
                           "--run_id", "conf", "--max_workers", "1", "--timeout", "120"],
                          cwd=official_dir, capture_output=True, text=True, timeout=900, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-3000:]
    ours = run_cli("eval", "swebench", "--predictions", str(tmp_path / "preds.jsonl"), "--env", "docker",
                   "--benchmark-params", json.dumps({"path": str(tmp_path / "rows.json")}),
                   "--results-dir", str(tmp_path / "results"), "--run-name", "conf", cwd=tmp_path, timeout=900)
    assert ours.returncode == 0, ours.stderr
    [run_dir] = [p.parent for p in (tmp_path / "results").glob("*/*/trials.jsonl")]

    found: dict[str, list[str]] = {"swebench-5.0.2/instance-report": [], "swebench-5.0.2/run-report": []}
    logs = official_dir / "logs" / "run_evaluation" / "conf" / MODEL.replace("/", "__")
    for instance in PATCHES:
        theirs, mine = logs / instance / "report.json", run_dir / "tasks" / instance / "attempt-1" / "report.json"
        if (theirs.exists(), theirs.exists() and theirs.read_text()) != (mine.exists(), mine.exists() and mine.read_text()):
            found["swebench-5.0.2/instance-report"].append(
                f"{instance}: official {theirs.read_text() if theirs.exists() else 'none'}, "
                f"ours {mine.read_text() if mine.exists() else 'none'}")
    official_report = json.loads((official_dir / f"{MODEL.replace('/', '__')}.conf.json").read_text())
    our_report = json.loads((run_dir / "report.json").read_text())
    engine_state = ("unstopped_instances", "unstopped_containers", "unremoved_images")
    found["swebench-run-report-engine-state"] = [
        f"{key}: official {official_report.get(key)}, ours {our_report.get(key)}"
        for key in engine_state if official_report.get(key) != our_report.get(key)]
    if {k: v for k, v in official_report.items() if k not in engine_state} != \
            {k: v for k, v in our_report.items() if k not in engine_state}:
        found["swebench-5.0.2/run-report"].append(f"official {official_report}, ours {our_report}")
    assert official_report["resolved_ids"] == ["conf__crlf-1"] and official_report["error_ids"] == ["conf__crlf-4"]
    tally.record(ANCHOR, "run_evaluation reports", len(PATCHES) + 1 - sum(len(v) for v in found.values()),
                 len(PATCHES) + 1)
    check_divergences(found, allowed)
