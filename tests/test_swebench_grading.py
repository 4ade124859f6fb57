"""SWE-bench grading end to end on the calc instances (tests/swebench_calc.py), graded by swebench's own code: runs,
eval of predictions, the local provider, the rate's denominator, image assets."""

from __future__ import annotations

import json
import shutil
import sys
import threading
import time
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from swebench_calc import (CalcRepo, F2P, IDS, NEW_TEST, TESTS, assert_verdicts, assert_verdicts_match_swebench,
                           calc_rows, diff_of_edit, eval_script, official_report, predictions_of, row_of, trials,
                           write_rows)
from swebench_calc import calc_image, calc_repo  # noqa: F401 (fixtures)


@pytest.mark.docker
def test_oracle_run_resolves_and_writes_predictions(cli, calc_repo, calc_image, tmp_path):
    rows = calc_rows(tmp_path / "rows.jsonl", calc_repo, calc_image, "python3")
    started = time.monotonic()
    done = cli("run", "swebench_lite", "oracle", "none", "--env", "docker", "--results-dir", str(tmp_path / "res"),
               "--run-name", "gold", "--benchmark-params", json.dumps({"path": str(rows), "sample_ids": [IDS["gold"]]}))
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    run_dir = tmp_path / "res" / "gold" / "swebench_lite__oracle__none__docker"
    row = trials(run_dir)[IDS["gold"]]
    assert row["status"] == "passed", row["message"]
    trial_dir = run_dir / "tasks" / IDS["gold"] / "attempt-1"
    assert "PASSED tests/test_calc.py::test_mul" in (trial_dir / "eval.log").read_text()
    assert (trial_dir / "patch.diff").read_text() == calc_repo.patches["gold"]
    predictions = [json.loads(line) for line in (run_dir / "predictions.jsonl").read_text().splitlines()]
    assert [(p["instance_id"], p["model_name_or_path"]) for p in predictions] == [(IDS["gold"], "none")]
    assert predictions[0]["model_patch"] == (trial_dir / "patch.diff").read_text()
    print(f"\none graded instance end to end (CLI start to exit, docker): {elapsed:.1f}s; "
          f"trial phases {row['timings']}")


@pytest.mark.docker
def test_eval_grades_predictions_and_round_trips(cli, calc_repo, calc_image, tmp_path):
    rows = calc_rows(tmp_path / "rows.jsonl", calc_repo, calc_image, "python3")
    (tmp_path / "preds.json").write_text(json.dumps(predictions_of(calc_repo)))
    selection = {"path": str(rows), "sample_ids": list(IDS.values())}
    common = ["--env", "docker", "--results-dir", str(tmp_path / "res"), "--task-concurrency", "4",
              "--benchmark-params", json.dumps(selection)]
    first = cli("eval", "swebench_lite", "--predictions", str(tmp_path / "preds.json"), "--run-name", "one", *common)
    assert first.returncode == 0, first.stderr
    run_dir = tmp_path / "res" / "one" / "swebench_lite__predictions__my-model__docker"
    graded = trials(run_dir)
    assert_verdicts(graded, calc_repo)
    assert_verdicts_match_swebench(rows, run_dir, graded)

    # Tests killed (OOM): swebench flags a likely infra failure but the instance is simply unresolved, not retried.
    killed = graded[IDS["killed"]]
    assert killed["status"] == "failed" and killed["retries"] == 0, killed
    assert killed["details"]["infra_failure"] is True and killed["details"]["infra_failure_reason"] == "out_of_memory"
    report = official_report(rows, run_dir, IDS["killed"])
    assert report["infra_failure"] is True and report["resolved"] is False

    # A 12 MiB eval log is graded whole: its verdict is at the end.
    big = graded[IDS["big_log"]]
    log = (run_dir / "tasks" / IDS["big_log"] / "attempt-1" / "eval.log").read_text()
    assert len(log) > 12 * 1024 * 1024 and ">>>>> End Test Output" in log[-3000:]
    assert big["status"] == "passed", big["message"]

    # A patch that only adds a git-ignored file is graded as submitted, not as an empty diff.
    ignored = graded[IDS["ignored_only"]]
    assert ignored["status"] == "failed" and not ignored["message"].startswith("empty patch"), ignored
    assert ignored["details"]["tests_parsed"] is True

    predictions = {p["instance_id"]: p["model_patch"] for p in map(json.loads, (run_dir / "predictions.jsonl").open())}
    assert predictions == {IDS[kind]: patch for kind, patch in calc_repo.patches.items()}

    again = cli("eval", "swebench_lite", "--predictions", str(run_dir / "predictions.jsonl"), "--run-name", "two", *common)
    assert again.returncode == 0, again.stderr
    second = trials(tmp_path / "res" / "two" / "swebench_lite__predictions__my-model__docker")
    assert {k: r["status"] for k, r in second.items()} == {k: r["status"] for k, r in graded.items()}


def local_eval(cli, calc_repo: CalcRepo, tmp_path: Path, rows: Path, predictions: dict, *extra: str):
    repos = tmp_path / "repos"
    for instance_id in (json.loads(line)["instance_id"] for line in rows.read_text().splitlines()):
        if not (repos / instance_id).exists():
            shutil.copytree(calc_repo.path, repos / instance_id)
    (tmp_path / "preds.json").write_text(json.dumps(predictions))
    overlay = tmp_path / "local.yaml"
    overlay.write_text("benchmark:\n  runs_on_host: true\n")
    done = cli("eval", "swebench_lite", "--predictions", str(tmp_path / "preds.json"), "--env", "local",
               "--config", str(overlay), "--results-dir", str(tmp_path / "res"), "--run-name", "local",
               "--benchmark-params", json.dumps({"path": str(rows), "repos_dir": str(repos)}), *extra)
    assert done.returncode == 0, done.stderr
    return done, tmp_path / "res" / "local" / "swebench_lite__predictions__my-model__local"


def test_eval_on_local_provider(cli, calc_repo, tmp_path):
    """Where no image is used, repos_dir/<instance_id> is staged at /testbed."""
    kinds = ["gold", "empty", "breaks_p2p", "not_applying", "ignored_only"]
    rows = write_rows(tmp_path / "rows.jsonl", [row_of(calc_repo, IDS[k], "unused", sys.executable) for k in kinds])
    _, run_dir = local_eval(cli, calc_repo, tmp_path, rows, predictions_of(calc_repo, kinds))
    graded = trials(run_dir)
    assert_verdicts(graded, calc_repo)
    assert_verdicts_match_swebench(rows, run_dir, graded)


def test_eval_rate_is_over_the_dataset_selection(cli, calc_repo, tmp_path):
    """As the official run report: instances without a prediction are not run and count as unresolved."""
    kinds = ["gold", "empty", "breaks_p2p", "not_applying"]
    rows = write_rows(tmp_path / "rows.jsonl", [row_of(calc_repo, IDS[k], "unused", sys.executable) for k in kinds])
    done, run_dir = local_eval(cli, calc_repo, tmp_path, rows, predictions_of(calc_repo, ["gold", "empty"]))
    assert sorted(trials(run_dir)) == sorted([IDS["gold"], IDS["empty"]])
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["tasks"], summary["tasks_attempted"], summary["solved_tasks"]) == (4, 2, 1)
    assert "solved 1/4 selected tasks (0.250" in done.stdout, done.stdout


class AssetServer:
    """Serves a directory over HTTP on 127.0.0.1, as the hub serves image_assets urls."""

    def __init__(self, root: Path) -> None:
        class Quiet(SimpleHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), partial(Quiet, directory=str(root)))
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/{name}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_image_assets_are_restored_before_the_tests(cli, calc_repo, tmp_path):
    """A multimodal row: its test compares against a binary baseline the text test patch cannot carry."""
    from swebench.harness.run_evaluation import _inject_asset_restore

    baseline = bytes(range(256)) * 4
    (tmp_path / "served").mkdir()
    (tmp_path / "served" / "baseline.png").write_bytes(baseline)
    test = ("\n\ndef test_baseline():\n    from pathlib import Path\n"
            f"    assert Path('tests/baseline.png').read_bytes() == bytes(range(256)) * 4\n")
    test_patch = diff_of_edit(calc_repo.path, {"tests/test_calc.py": TESTS + NEW_TEST + test})
    server = AssetServer(tmp_path / "served")
    try:
        row = row_of(calc_repo, "calc__calc-30", "unused", sys.executable, test_patch=test_patch,
                     eval_script=eval_script(calc_repo, sys.executable, test_patch),
                     FAIL_TO_PASS=json.dumps([F2P, "tests/test_calc.py::test_baseline"]),
                     image_assets=json.dumps({"test_patch": [{"path": "tests/baseline.png",
                                                              "url": server.url("baseline.png")}]}))
        rows = write_rows(tmp_path / "rows.jsonl", [row])
        predictions = {"calc__calc-30": {"model_name_or_path": "my-model", "model_patch": calc_repo.patches["gold"]}}
        _, run_dir = local_eval(cli, calc_repo, tmp_path, rows, predictions)
    finally:
        server.close()
    graded = trials(run_dir)["calc__calc-30"]
    assert graded["status"] == "passed", graded["message"]
    assert_verdicts_match_swebench(rows, run_dir, {"calc__calc-30": graded})
    trial_dir = run_dir / "tasks" / "calc__calc-30" / "attempt-1"
    assert (trial_dir / "image_assets" / "tests__baseline.png").read_bytes() == baseline
    from swebench.harness.utils import make_test_spec

    from agentcompass.formats.swebench.data import instance_for_test_spec, normalize_row

    official_script = _inject_asset_restore(
        make_test_spec(instance_for_test_spec(normalize_row(row), "unused")).eval_script,
        ["mkdir -p $(dirname tests/baseline.png) && cp /image_assets/tests__baseline.png tests/baseline.png"])
    assert (trial_dir / "eval.sh").read_text() == official_script
