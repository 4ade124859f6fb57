"""`eval --env gcp` end to end: ONE GCP Batch job whose tasks run for real.

The Batch client is the recording fake (tests/fake_gcp.py, bound to the real signatures) in the CLI
subprocess; it "runs" each task by executing the job's own task script under bash, with the job's
environment and BATCH_TASK_INDEX, against the local Docker engine and a GCS emulator on 127.0.0.1
(google-cloud-storage talks to it through STORAGE_EMULATOR_HOST, the task script with curl). The
instances are the SWE-bench fixture of swebench_calc.py, in its locally built image; the
verdicts must be those `eval --env docker` gives on the same predictions.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

import fake_gcp
from gcs_emulator import emulated_gcs
from swebench_calc import (IDS, assert_verdicts, assert_verdicts_match_swebench, calc_image, calc_repo,  # noqa: F401
                           calc_rows, predictions_of, trials)

pytest.importorskip("google.cloud.batch_v1", reason="pip install '.[gcp]' from the checkout")
pytest.importorskip("gcp_storage_emulator.server", reason="pip install gcp-storage-emulator")
TESTS = Path(__file__).resolve().parent
BUCKET = "ac-eval-test"
KINDS = ["gold", "empty", "breaks_p2p", "not_applying", "killed"]


@pytest.fixture
def gcs(monkeypatch):
    with emulated_gcs() as host:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", host)
        yield host


@pytest.fixture
def gcp_cli(cli, gcs, tmp_path):
    """The CLI with the fake Compute/Batch clients and ADC in its process, GCS emulated."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text("import fake_gcp\nfake_gcp.install()\n")
    log = tmp_path / "sdk-calls.jsonl"
    env = {"PYTHONPATH": os.pathsep.join([str(shim), str(TESTS), os.environ.get("PYTHONPATH", "")]),
           fake_gcp.LOG_ENV: str(log), fake_gcp.RUN_TASKS_ENV: "1", "STORAGE_EMULATOR_HOST": gcs}

    def run(*args: str, extra_env: dict[str, str] | None = None):
        log.unlink(missing_ok=True)
        result = cli(*args, env={**env, **(extra_env or {})}, timeout=600)
        return result, [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    return run


def blobs(host: str) -> list[str]:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    client = storage.Client(project="p", credentials=AnonymousCredentials())
    return [b.name for b in client.list_blobs(BUCKET)]


def leftover_containers(job: str) -> str:
    return subprocess.run(["docker", "ps", "-aq", "--filter", f"label=agentcompass-batch={job}"],
                          capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.docker
def test_eval_on_gcp_batch_grades_as_docker_does(gcp_cli, cli, gcs, calc_repo, calc_image, tmp_path):  # noqa: F811
    rows = calc_rows(tmp_path / "rows.jsonl", calc_repo, calc_image, "python3")
    (tmp_path / "preds.json").write_text(json.dumps(predictions_of(calc_repo, KINDS)))
    selection = json.dumps({"path": str(rows), "sample_ids": [IDS[k] for k in KINDS]})
    common = ["--results-dir", str(tmp_path / "res"), "--task-concurrency", "3", "--benchmark-params", selection]
    on_gcp, sdk = gcp_cli("eval", "swebench_lite", "--predictions", str(tmp_path / "preds.json"), "--env", "gcp",
                          "--run-name", "batch", "--env-params", json.dumps({"batch": {"bucket": BUCKET}}), *common)
    assert on_gcp.returncode == 0, on_gcp.stderr
    on_docker = cli("eval", "swebench_lite", "--predictions", str(tmp_path / "preds.json"), "--env", "docker",
                    "--run-name", "docker", *common)
    assert on_docker.returncode == 0, on_docker.stderr

    gcp_dir = tmp_path / "res" / "batch" / "swebench_lite__predictions__my-model__gcp"
    docker_dir = tmp_path / "res" / "docker" / "swebench_lite__predictions__my-model__docker"
    graded, reference = trials(gcp_dir), trials(docker_dir)
    assert_verdicts(graded, calc_repo)
    assert_verdicts_match_swebench(rows, gcp_dir, graded)
    for instance_id, expected in reference.items():
        row = graded[instance_id]
        assert (row["status"], row["message"], row["reward"], row["rewards"]) == \
            (expected["status"], expected["message"], expected["reward"], expected["rewards"]), instance_id
        for key in ("resolved", "tests_parsed", "FAIL_TO_PASS", "PASS_TO_PASS", "infra_failure", "patch"):
            assert row["details"].get(key) == expected["details"].get(key), (instance_id, key)
        for name in ("eval.log", "verifier.log", "patch.diff"):
            mine, theirs = (d / "tasks" / instance_id / "attempt-1" / name for d in (gcp_dir, docker_dir))
            assert mine.is_file() == theirs.is_file(), (instance_id, name)
            if name != "eval.log" and theirs.is_file():
                assert mine.read_text() == theirs.read_text(), (instance_id, name)
    summary = json.loads((gcp_dir / "summary.json").read_text())
    assert (summary["passed"], summary["failed"], summary["errors"]) == (1, 4, 0)
    assert (gcp_dir / "predictions.jsonl").is_file()

    # ONE job: a task per non-empty patch, parallelism from --task-concurrency, the data in GCS, then deleted.
    [create] = [c for c in sdk if c["call"] == "BatchServiceClient.create_job"]
    request = create["args"][0]
    [group] = request["job"]["task_groups"]
    assert (int(group["task_count"]), int(group["parallelism"])) == (4, 3)
    assert request["job"]["allocation_policy"]["instances"][0]["policy"]["machine_type"] == "e2-standard-4"
    variables = group["task_spec"]["environment"]["variables"]
    assert variables["AGENTCOMPASS_BUCKET"] == BUCKET and variables["AGENTCOMPASS_PREFIX"].startswith("agentcompass/")
    assert group["task_spec"]["runnables"][0]["script"]["text"].startswith("#!/bin/bash")
    job = request["job_id"]
    assert [c["kwargs"]["name"] for c in sdk if c["call"] == "BatchServiceClient.delete_job"] == \
        [f"{request['parent']}/jobs/{job}"]
    assert blobs(gcs) == []  # the run's inputs and outputs are gone; the lifecycle rule stays
    assert leftover_containers(job) == ""


@pytest.mark.docker
def test_a_task_batch_gives_up_on_is_an_infra_error(gcp_cli, gcs, calc_repo, calc_image, tmp_path):  # noqa: F811
    rows = calc_rows(tmp_path / "rows.jsonl", calc_repo, calc_image, "python3")
    (tmp_path / "preds.json").write_text(json.dumps(predictions_of(calc_repo, ["gold"])))
    params = {"image": "127.0.0.1:9/agentcompass/missing:1", "batch": {"bucket": BUCKET, "max_retry_count": 1}}
    done, sdk = gcp_cli("eval", "swebench_lite", "--predictions", str(tmp_path / "preds.json"), "--env", "gcp",
                        "--results-dir", str(tmp_path / "res"), "--run-name", "broken", "--env-params", json.dumps(params),
                        "--benchmark-params", json.dumps({"path": str(rows), "sample_ids": [IDS["gold"]]}))
    assert done.returncode == 0, done.stderr
    row = trials(tmp_path / "res" / "broken" / "swebench_lite__predictions__my-model__gcp")[IDS["gold"]]
    assert (row["status"], row["error_category"]) == ("error", "infra"), row
    assert "cannot pull 127.0.0.1:9/agentcompass/missing:1" in row["message"]
    assert any(c["call"] == "BatchServiceClient.delete_job" for c in sdk)
    assert blobs(gcs) == []


def test_eval_on_gcp_without_a_bucket_is_one_line_and_writes_nothing(gcp_cli, calc_repo, tmp_path):  # noqa: F811
    rows = calc_rows(tmp_path / "rows.jsonl", calc_repo, "agentcompass-test/none:1", "python3")
    (tmp_path / "preds.json").write_text(json.dumps(predictions_of(calc_repo, ["gold"])))
    done, sdk = gcp_cli("eval", "swebench_lite", "--predictions", str(tmp_path / "preds.json"), "--env", "gcp",
                        "--results-dir", str(tmp_path / "res"), "--benchmark-params", json.dumps({"path": str(rows)}))
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "environments.gcp.batch.bucket" in done.stderr, done.stderr
    assert not (tmp_path / "res").exists()
    assert not any(c["call"].startswith("BatchServiceClient") for c in sdk)


@pytest.mark.docker
def test_validate_on_gcp_grades_the_oracle_on_batch(gcp_cli, gcs, calc_repo, calc_image, tmp_path):  # noqa: F811
    rows = calc_rows(tmp_path / "rows.jsonl", calc_repo, calc_image, "python3")
    done, sdk = gcp_cli("validate", "swebench_lite", "--env", "gcp", "--results-dir", str(tmp_path / "res"),
                        "--run-name", "v", "--env-params", json.dumps({"batch": {"bucket": BUCKET}}),
                        "--benchmark-params", json.dumps({"path": str(rows), "sample_ids": [IDS["gold"]]}))
    assert done.returncode == 0, done.stderr + done.stdout
    assert f"{IDS['gold']}  passed" in done.stdout and "ok" in done.stdout
    # The oracle's gold patch ran on one Batch task; nop's empty patch needs none. No VM was made.
    [create] = [c for c in sdk if c["call"] == "BatchServiceClient.create_job"]
    assert int(create["args"][0]["job"]["task_groups"][0]["task_count"]) == 1
    assert not any(c["call"].startswith("InstancesClient") for c in sdk)
    assert blobs(gcs) == []


@pytest.mark.docker
@pytest.mark.parametrize("sig, slow_get", [("SIGINT", "0"), ("SIGTERM", "0"), ("SIGTERM", "3")])
def test_ctrl_c_deletes_the_job_and_its_blobs(gcp_cli, gcs, calc_repo, calc_image, tmp_path, sig, slow_get):  # noqa: F811
    """The first signal ends the run within seconds while Batch runs a 300 s task, also when it cuts a call short
    and leaves that client's connection hanging (slow_get): the clean-up runs on fresh clients."""
    import signal
    import sys
    import time

    rows = calc_rows(tmp_path / "rows.jsonl", calc_repo, calc_image, "python3")
    (tmp_path / "preds.json").write_text(json.dumps(predictions_of(calc_repo, ["gold", "breaks_p2p"])))
    log = tmp_path / "calls.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "shim"), str(TESTS), os.environ.get("PYTHONPATH", "")]),
           fake_gcp.LOG_ENV: str(log), fake_gcp.RUN_TASKS_ENV: "1", fake_gcp.TASK_DELAY_ENV: "300",
           fake_gcp.SLOW_GET_ENV: slow_get, "STORAGE_EMULATOR_HOST": gcs}
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentcompass", "eval", "swebench_lite", "--predictions", str(tmp_path / "preds.json"),
         "--env", "gcp", "--results-dir", str(tmp_path / "res"), "--run-name", "cut",
         "--env-params", json.dumps({"batch": {"bucket": BUCKET}}),
         "--benchmark-params", json.dumps({"path": str(rows), "sample_ids": [IDS["gold"], IDS["breaks_p2p"]]})],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240  # a busy machine: the CLI's start, the image check, the uploads
    while not (log.exists() and "create_job" in log.read_text()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert blobs(gcs), "the inputs are uploaded before the job is created"
    time.sleep(1)  # inside the first get_job (slow_get: it takes 3 s)
    proc.send_signal(getattr(signal, sig))
    started = time.monotonic()
    _, stderr = proc.communicate(timeout=120)  # a hung client would hang the run: this fails then
    assert proc.returncode == 130, stderr
    assert time.monotonic() - started < 60  # within seconds (a busy machine's), not the task's 300 s
    calls = [json.loads(line)["call"] for line in log.read_text().splitlines()]
    assert "BatchServiceClient.delete_job" in calls
    assert blobs(gcs) == []
    assert not (tmp_path / "res" / "cut" / "swebench_lite__predictions__my-model__gcp" / "trials.jsonl").exists() or \
        trials(tmp_path / "res" / "cut" / "swebench_lite__predictions__my-model__gcp") == {}


@pytest.mark.docker
def test_a_rerun_with_retry_errors_regrades_what_batch_gave_up_on(gcp_cli, calc_repo, calc_image, tmp_path):  # noqa: F811
    rows = calc_rows(tmp_path / "rows.jsonl", calc_repo, calc_image, "python3")
    (tmp_path / "preds.json").write_text(json.dumps(predictions_of(calc_repo, ["gold", "empty"])))
    args = ["eval", "swebench_lite", "--predictions", str(tmp_path / "preds.json"), "--env", "gcp",
            "--results-dir", str(tmp_path / "res"), "--run-name", "again",
            "--env-params", json.dumps({"batch": {"bucket": BUCKET, "max_retry_count": 0}}),
            "--benchmark-params", json.dumps({"path": str(rows), "sample_ids": [IDS["gold"], IDS["empty"]]})]
    first, _ = gcp_cli(*args, extra_env={fake_gcp.TASK_FAIL_ENV: "1"})
    assert first.returncode == 0, first.stderr
    run_dir = tmp_path / "res" / "again" / "swebench_lite__predictions__my-model__gcp"
    graded = trials(run_dir)
    assert (graded[IDS["gold"]]["status"], graded[IDS["gold"]]["error_category"]) == ("error", "infra")
    assert "the VM was preempted" in graded[IDS["gold"]]["message"]
    assert graded[IDS["empty"]]["status"] == "failed"  # graded here: no Batch task
    second, sdk = gcp_cli(*args, "--retry-errors")
    assert second.returncode == 0, second.stderr
    assert trials(run_dir)[IDS["gold"]]["status"] == "passed"
    [create] = [c for c in sdk if c["call"] == "BatchServiceClient.create_job"]
    assert int(create["args"][0]["job"]["task_groups"][0]["task_count"]) == 1  # only the error is regraded


def batch_events(sdk: list[dict]) -> tuple[list[str], list[str]]:
    """What the job's tasks did to their (fake) VM's firewall and `docker run`s, in order, and the rules it holds."""
    [create] = [c for c in sdk if c["call"] == "BatchServiceClient.create_job"]
    state = Path(fake_gcp.STATE_DIR) / create["args"][0]["job_id"]
    rules = state / fake_gcp.VM_RULES
    return (state / fake_gcp.VM_EVENTS).read_text().splitlines(), rules.read_text().splitlines() if rules.exists() else []


@pytest.mark.docker
def test_batch_blocks_the_metadata_server_before_the_grading_container_starts(gcp_cli, gcs, calc_repo, calc_image,  # noqa: F811
                                                                              tmp_path):
    rows = calc_rows(tmp_path / "rows.jsonl", calc_repo, calc_image, "python3")
    (tmp_path / "preds.json").write_text(json.dumps(predictions_of(calc_repo, ["gold"])))
    done, sdk = gcp_cli("eval", "swebench_lite", "--predictions", str(tmp_path / "preds.json"), "--env", "gcp",
                        "--results-dir", str(tmp_path / "res"), "--run-name", "meta",
                        "--env-params", json.dumps({"batch": {"bucket": BUCKET}}),
                        "--benchmark-params", json.dumps({"path": str(rows), "sample_ids": [IDS["gold"]]}))
    assert done.returncode == 0, done.stderr
    row = trials(tmp_path / "res" / "meta" / "swebench_lite__predictions__my-model__gcp")[IDS["gold"]]
    assert row["status"] == "passed", row  # the honest control: grading is unchanged
    events, rules = batch_events(sdk)
    drop = "DOCKER-USER -d 169.254.169.254/32 -j DROP"
    assert drop in rules
    grading = next(i for i, e in enumerate(events) if e.startswith("docker run -d"))
    assert f"iptables -I {drop}" in events[:grading]


@pytest.mark.docker
def test_no_grading_container_starts_where_batch_cannot_block_the_metadata_server(gcp_cli, gcs, calc_repo,  # noqa: F811
                                                                                   calc_image, tmp_path):
    rows = calc_rows(tmp_path / "rows.jsonl", calc_repo, calc_image, "python3")
    (tmp_path / "preds.json").write_text(json.dumps(predictions_of(calc_repo, ["gold"])))
    params = {"batch": {"bucket": BUCKET, "max_retry_count": 0}}
    done, sdk = gcp_cli("eval", "swebench_lite", "--predictions", str(tmp_path / "preds.json"), "--env", "gcp",
                        "--results-dir", str(tmp_path / "res"), "--run-name", "nofw", "--env-params", json.dumps(params),
                        "--benchmark-params", json.dumps({"path": str(rows), "sample_ids": [IDS["gold"]]}),
                        extra_env={fake_gcp.NO_FIREWALL_ENV: "1"})
    assert done.returncode == 0, done.stderr
    row = trials(tmp_path / "res" / "nofw" / "swebench_lite__predictions__my-model__gcp")[IDS["gold"]]
    assert (row["status"], row["error_category"]) == ("error", "infra"), row
    assert "cannot block the metadata server" in row["message"]
    events, _ = batch_events(sdk)
    assert not [e for e in events if e.startswith("docker run -d")]
