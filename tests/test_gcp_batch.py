"""ONE GCP Batch job for many tasks, at the SDK boundary: a recording fake BatchServiceClient
(tests/fake_gcp.py) whose calls are checked against the real client's signatures."""

from __future__ import annotations

import inspect
import threading

import pytest

import fake_gcp
from agentcompass.core.errors import InfraError

batch_v1 = pytest.importorskip("google.cloud.batch_v1", reason="pip install '.[gcp]' from the checkout")


@pytest.fixture
def client(monkeypatch):
    import agentcompass.providers.gcp.batch as gcp_batch

    fake_gcp.reset()
    fake_gcp.BatchServiceClient.jobs.clear()
    monkeypatch.setattr(gcp_batch, "POLL_FIRST_S", 0.01)
    monkeypatch.setattr(gcp_batch, "POLL_MAX_S", 0.02)
    return fake_gcp.BatchServiceClient()


def job(**more):
    from agentcompass.providers.gcp.batch import job_definition

    settings = dict(runner_image="us-docker.pkg.dev/p/agentcompass/runner:1", script="echo task $BATCH_TASK_INDEX",
                    task_count=500, parallelism=50, machine_type="e2-standard-4", cpu_milli=4000, memory_mib=16384,
                    environment={"AGENTCOMPASS_BUCKET": "ac-eval", "AGENTCOMPASS_PREFIX": "agentcompass/r1/"},
                    labels={"agentcompass": "1", "run": "r1"}, max_run_duration_s=3600)
    return job_definition(**{**settings, **more})


def test_the_job_is_one_task_group_with_a_container_runnable(client):
    from agentcompass.providers.gcp.batch import BatchJobs

    name = BatchJobs(client, "proj", "us-central1").submit("ac-r1-eval", job())
    assert name == "projects/proj/locations/us-central1/jobs/ac-r1-eval"
    [(_, (request,), _)] = [c for c in fake_gcp.calls if c[0] == "BatchServiceClient.create_job"]
    assert (request.parent, request.job_id) == ("projects/proj/locations/us-central1", "ac-r1-eval")
    [group] = request.job.task_groups
    assert (group.task_count, group.parallelism) == (500, 50)
    spec = group.task_spec
    [runnable] = spec.runnables
    assert runnable.container.image_uri == "us-docker.pkg.dev/p/agentcompass/runner:1"
    assert list(runnable.container.commands) == ["-c", "echo task $BATCH_TASK_INDEX"]
    assert "/var/run/docker.sock" in runnable.container.options
    assert dict(spec.environment.variables) == {"AGENTCOMPASS_BUCKET": "ac-eval", "AGENTCOMPASS_PREFIX": "agentcompass/r1/",
                                                "AGENTCOMPASS_RUNNER_IMAGE": "us-docker.pkg.dev/p/agentcompass/runner:1"}
    assert (spec.compute_resource.cpu_milli, spec.compute_resource.memory_mib) == (4000, 16384)
    assert spec.max_run_duration.seconds == 3600
    assert request.job.allocation_policy.instances[0].policy.machine_type == "e2-standard-4"
    assert dict(request.job.labels) == {"agentcompass": "1", "run": "r1"}
    assert len(batch_v1.Job.to_json(request.job)) < 10_000  # the data stays in GCS, whatever the task count


def test_polling_reports_progress_until_the_job_succeeds(client):
    from agentcompass.providers.gcp.batch import BatchJobs

    jobs = BatchJobs(client, "proj", "us-central1")
    name = jobs.submit("ac-r1-eval", job(task_count=3))
    fake_gcp.batch_states[:] = [("QUEUED", {"QUEUED": 3}), ("RUNNING", {"RUNNING": 2, "SUCCEEDED": 1}),
                                ("SUCCEEDED", {"SUCCEEDED": 3})]
    seen: list[dict[str, int]] = []
    jobs.wait(name, seen.append, threading.Event(), timeout_s=60)
    assert seen == [{"QUEUED": 3}, {"RUNNING": 2, "SUCCEEDED": 1}, {"SUCCEEDED": 3}]
    jobs.delete(name)
    jobs.delete(name)  # already gone: fine
    assert [c[2]["name"] for c in fake_gcp.calls if c[0] == "BatchServiceClient.delete_job"] == [name, name]


def test_a_failed_job_is_an_infra_error_with_its_status_events(client):
    from agentcompass.providers.gcp.batch import BatchJobs

    jobs = BatchJobs(client, "proj", "us-central1")
    name = jobs.submit("ac-r1-eval", job(task_count=2))
    fake_gcp.batch_states[:] = [("RUNNING", {"RUNNING": 2}), ("FAILED", {"FAILED": 1, "SUCCEEDED": 1})]
    with pytest.raises(InfraError, match="failed: Task state is updated from RUNNING to FAILED"):
        jobs.wait(name, lambda counts: None, threading.Event(), timeout_s=60)


def test_an_interrupt_stops_polling(client):
    from agentcompass.providers.gcp.batch import BatchJobs

    jobs = BatchJobs(client, "proj", "us-central1")
    name = jobs.submit("ac-r1-eval", job(task_count=2))
    fake_gcp.batch_states[:] = [("RUNNING", {"RUNNING": 2})]
    stop = threading.Event()
    stop.set()
    with pytest.raises(InfraError, match="interrupted"):
        jobs.wait(name, lambda counts: None, stop, timeout_s=60)


def test_every_batch_call_binds_to_the_real_signature(client):
    from agentcompass.providers.gcp.batch import BatchJobs

    jobs = BatchJobs(client, "proj", "us-central1")
    name = jobs.submit("ac-r1-eval", job(task_count=1))
    fake_gcp.batch_states[:] = [("SUCCEEDED", {"SUCCEEDED": 1})]
    jobs.wait(name, lambda counts: None, threading.Event(), timeout_s=60)
    jobs.delete(name)
    real = batch_v1.BatchServiceClient
    seen = set()
    for call, args, kwargs in fake_gcp.calls:
        method = real.__init__ if call == "BatchServiceClient" else getattr(real, call.rpartition(".")[2])
        if call == "BatchServiceClient":
            kwargs = {"credentials": None}
        inspect.signature(method).bind(None, *args, **kwargs)  # TypeError if wrong
        seen.add(call)
    assert seen == {"BatchServiceClient", "BatchServiceClient.create_job", "BatchServiceClient.get_job",
                    "BatchServiceClient.delete_job"}


def test_without_a_runner_image_the_task_script_runs_on_the_batch_vm(client):
    from agentcompass.providers.gcp.batch import BatchJobs, task_script

    BatchJobs(client, "proj", "us-central1").submit("ac-r1-eval", job(runner_image=None, script=task_script()))
    [(_, (request,), _)] = [c for c in fake_gcp.calls if c[0] == "BatchServiceClient.create_job"]
    [runnable] = request.job.task_groups[0].task_spec.runnables
    assert runnable.script.text.startswith("#!/bin/bash") and "BATCH_TASK_INDEX" in runnable.script.text
    assert not runnable.container.image_uri
    policy = request.job.allocation_policy.instances[0].policy
    assert (policy.boot_disk.image, policy.provisioning_model.name) == ("batch-debian", "STANDARD")


def test_the_boot_disk_holds_the_largest_image_and_each_task_removes_what_it_pulled(client, base_image):
    """Batch reuses a VM for the next task: a disk sized for one image (the largest, twice over, plus room; at
    least the floor) stays enough only if each task removes the image it pulled."""
    import subprocess

    from agentcompass.providers.gcp.batch import boot_disk_gb, task_script

    policy = job(boot_disk_gb=64).allocation_policy.instances[0].policy
    assert policy.boot_disk.size_gb == 64
    assert boot_disk_gb(100, ["not-here/none:1"]) == 100  # unknown size: the floor
    size = int(subprocess.run(["docker", "image", "inspect", "--format", "{{.Size}}", base_image],
                              capture_output=True, text=True, check=True).stdout)
    assert boot_disk_gb(1, [base_image]) == -(-2 * size // 10**9) + 20
    script = task_script()
    assert 'pulled="$IMAGE"' in script and 'docker rmi -f "$pulled"' in script
