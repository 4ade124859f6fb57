"""A run's files in GCS (the staging for `eval --env gcp` on GCP Batch), for real through
google-cloud-storage against a GCS emulator on 127.0.0.1 (PyPI gcp-storage-emulator)."""

from __future__ import annotations

import json

import pytest

from gcs_emulator import emulated_gcs

storage = pytest.importorskip("google.cloud.storage", reason="pip install '.[gcp]' from the checkout")
pytest.importorskip("gcp_storage_emulator.server", reason="pip install gcp-storage-emulator")


@pytest.fixture
def client(monkeypatch):
    from google.auth.credentials import AnonymousCredentials

    with emulated_gcs() as host:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", host)
        yield storage.Client(project="test-project", credentials=AnonymousCredentials())


def run_bucket(client, run="r1"):
    from agentcompass.providers.gcp.storage import RunBucket

    return RunBucket(client, "ac-eval", run)


def test_a_missing_bucket_is_created_with_one_lifecycle_rule(client):
    for _ in range(2):  # a second run finds the bucket and its rule
        run_bucket(client).ensure("us-central1", ttl_days=7)
    rules = list(client.get_bucket("ac-eval").lifecycle_rules)
    assert rules == [{"action": {"type": "Delete"}, "condition": {"age": 7, "matchesPrefix": ["agentcompass/"]}}]


def test_inputs_are_uploaded_under_the_run(client):
    staged = run_bucket(client)
    staged.ensure("us-central1", ttl_days=7)
    predictions = {"a__b-1": {"instance_id": "a__b-1", "model_patch": "diff --git a/x b/x\n", "model_name_or_path": "m"}}
    manifest = [{"index": 0, "instance_id": "a__b-1", "image": "swebench/sweb.eval.x86_64.a_1776_b-1:latest"}]
    staged.upload_inputs(predictions, manifest)
    bucket = client.bucket("ac-eval")
    lines = bucket.blob("agentcompass/r1/predictions.jsonl").download_as_text().splitlines()
    assert [json.loads(line) for line in lines] == list(predictions.values())
    assert json.loads(bucket.blob("agentcompass/r1/manifest.json").download_as_text()) == manifest
    assert staged.url("manifest.json") == "gs://ac-eval/agentcompass/r1/manifest.json"


def test_task_outputs_come_back_and_delete_clears_only_this_run(client, tmp_path):
    staged = run_bucket(client)
    staged.ensure("us-central1", ttl_days=7)
    bucket = client.bucket("ac-eval")
    bucket.blob("agentcompass/r1/tasks/0/eval.log").upload_from_string("PASSED tests/test_x.py::test_a\n")
    bucket.blob("agentcompass/r1/tasks/1/report.json").upload_from_string('{"resolved": false}')
    bucket.blob("agentcompass/r2/tasks/0/eval.log").upload_from_string("another run\n")
    written = staged.download_outputs(tmp_path / "out")
    assert sorted(p.relative_to(tmp_path / "out").as_posix() for p in written) == ["tasks/0/eval.log", "tasks/1/report.json"]
    assert (tmp_path / "out" / "tasks" / "0" / "eval.log").read_text() == "PASSED tests/test_x.py::test_a\n"
    assert staged.delete() == 2
    assert [b.name for b in client.list_blobs("ac-eval")] == ["agentcompass/r2/tasks/0/eval.log"]
