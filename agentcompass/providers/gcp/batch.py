"""ONE GCP Batch job for many tasks (evaluation at scale): its definition, submission, polling
and deletion. Task i of the job reads entry i of the run's manifest (BATCH_TASK_INDEX, set by
Batch) from the run's GCS prefix (gcs.RunBucket) and writes its outputs back there, so the job
definition stays small whatever the number of tasks. The `google-cloud-batch` SDK is imported
inside the functions that use it.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Callable

from pydantic import Field

from agentcompass.core.errors import InfraError, UserError
from agentcompass.providers.remote import one_line
from agentcompass.core.schema import PositiveInt, Strict

POLL_FIRST_S, POLL_MAX_S = 5.0, 60.0  # polling backoff: fast while a job starts, then at most once a minute
DONE, FAILED = "SUCCEEDED", ("FAILED", "CANCELLED")
TASK_SCRIPT = Path(__file__).with_name("batch_task.sh")  # what every task of the job runs


class BatchSettings(Strict):
    """`environments.gcp.batch`: how `eval` and `validate` on gcp grade on ONE GCP Batch job."""

    bucket: str | None = None  # GCS bucket for the run's inputs and outputs; created when missing
    bucket_location: str | None = None  # where a new bucket goes; default the region
    blob_ttl_days: PositiveInt = 7  # lifecycle rule: agentcompass/ objects go after this, even if a run dies
    machine_type: str = "e2-standard-4"  # per task group; 4 vCPU, 16 GB as CooperBench uses
    cpu_milli: PositiveInt = 4000  # one task's share: one task per VM
    memory_mib: PositiveInt = 15 * 1024  # the VM keeps some of its 16 GB for itself
    runner_image: str | None = None  # None: the task script runs on the Batch VM; else in this image (bash, curl, docker CLI, iptables)
    vm_image: str = "batch-debian"  # the Batch VM's OS image (has Docker and curl)
    # The Batch VMs' boot disk, in GB: at least this, more when the instance images are known to be larger
    # (twice the largest image the local engine holds, plus room). Each task removes its image when done, as
    # Batch reuses a VM for the next task: the disk holds one image at a time, not all of them.
    boot_disk_gb: PositiveInt = 100
    task_overhead_s: PositiveInt = 1800  # image pull and start, on top of the recipe's verify timeout
    job_timeout_s: PositiveInt = 24 * 3600  # the orchestrator stops waiting (and deletes the job) after this
    max_retry_count: int = Field(2, ge=0, le=10)  # Batch retries a task whose script failed (infra)


def boot_disk_gb(floor: int, images: list[str]) -> int:
    """The boot disk for tasks of these images: the floor, or room for the largest image twice over (a pull
    unpacks beside the compressed layers) plus 20 GB for the OS and the grading, when the local engine knows
    the images' sizes; an image it does not hold counts as fitting the floor."""
    import subprocess

    largest = 0
    for image in sorted(set(images)):
        try:
            done = subprocess.run(["docker", "image", "inspect", "--format", "{{.Size}}", image], capture_output=True,
                                  text=True, timeout=10)
            largest = max(largest, int(done.stdout.strip() or 0) if done.returncode == 0 else 0)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            continue
    return max(floor, -(-2 * largest // 10**9) + 20 if largest else 0)


def task_script() -> str:
    """The task script, with the trial VMs' metadata-server rule (vm.metadata_block) in it."""
    import shlex

    from agentcompass.providers.gcp.vm import metadata_block

    rule = metadata_block()
    return (TASK_SCRIPT.read_text(encoding="utf-8").replace("@METADATA_BLOCK_QUOTED@", shlex.quote(rule))
            .replace("@METADATA_BLOCK@", rule))


def job_definition(*, script: str, task_count: int, parallelism: int, machine_type: str,
                   cpu_milli: int, memory_mib: int, environment: dict[str, str], labels: dict[str, str],
                   max_run_duration_s: int, runner_image: str | None = None, vm_image: str = "batch-debian",
                   max_retry_count: int = 2, spot: bool = False, service_account: str | None = None,
                   boot_disk_gb: int = 100) -> Any:
    """A job of `task_count` tasks, `parallelism` at once, each running `script`: on the Batch VM, or in
    the runner container with the VM's Docker socket (either way it starts the instance's own image)."""
    from google.cloud import batch_v1

    if runner_image:  # the task script blocks the metadata server through a privileged helper of this image
        environment = {**environment, "AGENTCOMPASS_RUNNER_IMAGE": runner_image}
        runnable = batch_v1.Runnable(container=batch_v1.Runnable.Container(
            image_uri=runner_image, entrypoint="/bin/bash", commands=["-c", script],
            options="-v /var/run/docker.sock:/var/run/docker.sock"))
    else:
        runnable = batch_v1.Runnable(script=batch_v1.Runnable.Script(text=script))
    task_spec = batch_v1.TaskSpec(
        runnables=[runnable],
        compute_resource=batch_v1.ComputeResource(cpu_milli=cpu_milli, memory_mib=memory_mib),
        max_run_duration=f"{max_run_duration_s}s", max_retry_count=max_retry_count,
        environment=batch_v1.Environment(variables=environment))
    policy = batch_v1.AllocationPolicy.InstancePolicy(
        machine_type=machine_type, provisioning_model="SPOT" if spot else "STANDARD",
        boot_disk=batch_v1.AllocationPolicy.Disk(image=vm_image, size_gb=boot_disk_gb))
    allocation = batch_v1.AllocationPolicy(instances=[batch_v1.AllocationPolicy.InstancePolicyOrTemplate(policy=policy)])
    if service_account and service_account.lower() not in ("default", "none"):  # "default": Batch's own default
        allocation.service_account = batch_v1.ServiceAccount(email=service_account)
    return batch_v1.Job(
        task_groups=[batch_v1.TaskGroup(task_spec=task_spec, task_count=task_count, parallelism=parallelism)],
        allocation_policy=allocation, labels=labels,
        logs_policy=batch_v1.LogsPolicy(destination=batch_v1.LogsPolicy.Destination.CLOUD_LOGGING))


class BatchJobs:
    def __init__(self, client: Any, project: str, region: str) -> None:
        self.client, self.parent = client, f"projects/{project}/locations/{region}"

    def submit(self, job_id: str, job: Any) -> str:
        """Create the job; returns its full name. A job id is a request id too: resubmitting is refused."""
        from google.api_core import exceptions as gexc
        from google.cloud import batch_v1

        try:
            created = self.client.create_job(request=batch_v1.CreateJobRequest(parent=self.parent, job_id=job_id, job=job))
        except (gexc.Forbidden, gexc.Unauthorized) as exc:
            raise UserError(f"GCP Batch refused the job ({one_line(exc)[:200]}); the account needs roles/batch.jobsEditor "
                            "and roles/iam.serviceAccountUser, with the Batch API enabled") from exc
        except gexc.GoogleAPICallError as exc:
            raise InfraError(f"cannot create Batch job {job_id}: {one_line(exc)[:300]}") from exc
        return str(created.name)

    def wait(self, name: str, on_progress: Callable[[dict[str, int]], None], stop: threading.Event,
             timeout_s: float) -> None:
        """Poll with backoff until the job succeeds; InfraError when it fails, is stopped or takes too long."""
        from google.api_core import exceptions as gexc

        deadline = time.monotonic() + timeout_s
        delay = POLL_FIRST_S
        while True:
            try:
                job = self.client.get_job(name=name)
            except gexc.GoogleAPICallError as exc:
                if not isinstance(exc, (gexc.ServiceUnavailable, gexc.InternalServerError, gexc.TooManyRequests)):
                    raise InfraError(f"cannot read Batch job {name}: {one_line(exc)[:300]}") from exc
                job = None
            if job is not None:
                state = job.status.state.name
                on_progress(task_counts(job))
                if state == DONE:
                    return
                if state in FAILED:
                    events = [one_line(e.description) for e in job.status.status_events][-3:]
                    raise InfraError(f"Batch job {name} {state.lower()}: {'; '.join(events) or 'no status events'}")
            if time.monotonic() > deadline:
                raise InfraError(f"Batch job {name} did not finish within {timeout_s:.0f}s")
            if stop.wait(delay):
                raise InfraError("interrupted")
            delay = min(delay * 1.5, POLL_MAX_S)

    def delete(self, name: str) -> None:
        """Delete the job (its VMs go with it); a job already gone is fine."""
        from google.api_core import exceptions as gexc

        try:
            self.client.delete_job(name=name)
        except gexc.NotFound:
            pass
        except gexc.GoogleAPICallError as exc:
            raise InfraError(f"cannot delete Batch job {name}: {one_line(exc)[:300]}") from exc

    def delete_labelled(self, labels: dict[str, str]) -> int:
        """Delete the region's jobs carrying every one of `labels` (what a killed `eval` left); returns how many.
        A project whose Batch API is off has none."""
        from google.api_core import exceptions as gexc

        try:
            jobs = [job.name for job in self.client.list_jobs(parent=self.parent)
                    if all(job.labels.get(key) == value for key, value in labels.items())]
        except gexc.Forbidden as exc:
            if "SERVICE_DISABLED" in str(exc):
                return 0
            raise UserError(f"GCP Batch refused to list jobs in {self.parent} ({one_line(exc)[:200]}); "
                            "the account needs roles/batch.jobsViewer (roles/batch.jobsEditor to delete them)") from exc
        except gexc.GoogleAPICallError as exc:
            raise InfraError(f"cannot list Batch jobs in {self.parent}: {one_line(exc)[:300]}") from exc
        for name in jobs:
            self.delete(name)
        return len(jobs)


def task_counts(job: Any) -> dict[str, int]:
    """Tasks per state (QUEUED, RUNNING, SUCCEEDED, FAILED, ...) over the job's task groups."""
    counts: dict[str, int] = {}
    for group in job.status.task_groups.values():
        for state, count in group.counts.items():
            counts[state] = counts.get(state, 0) + int(count)
    return counts
