"""`eval` and `validate` on gcp: no VM per trial, ONE GCP Batch job grades every submission.

The run's pending attempts become the job's tasks (task i: BATCH_TASK_INDEX i). Each task's inputs
(the instance image, its eval script, the submission) go to the run's GCS prefix with the predictions
and a manifest; the job's definition carries only the task script, so it stays small whatever the
count. While the job runs, each task that wrote its outputs is fetched and graded here, by the
format's own grading (swebench's get_eval_report), into the usual results layout; a task Batch gave
up on is an infra error. The job and the blobs are deleted at the end, on Ctrl-C and SIGTERM too,
unless run.keep_environment.
"""

from __future__ import annotations

import io
import os
import shlex
import signal
import sys
import tarfile
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from agentcompass.core.errors import InfraError, UserError
from agentcompass.providers.gcp.provider import GcpProvider
from agentcompass.providers.gcp.vm import instance_name, label_value
from agentcompass.providers.gcp.api import gcp_credentials
from agentcompass.core.results import TrialResult, iso, now_iso
from agentcompass.core.sandbox import SandboxSpec
from agentcompass.core.context import TrialContext

if TYPE_CHECKING:
    from agentcompass.formats.swebench.batch import BatchWork
    from agentcompass.core.progress import Progress
    from agentcompass.core.results import ResultsStore
    from agentcompass.core.prepare import PreparedRun
    from agentcompass.core.task import Task

log = structlog.get_logger("agentcompass")
CLEANUP_S = 10.0  # after an interrupt, how long deleting the job and the blobs may hold the exit
EMULATOR_ENV = "STORAGE_EMULATOR_HOST"  # google-cloud-storage's emulator setting; the task script gets it too


@dataclass
class Item:
    """One pending attempt and what grading it needs."""

    task: "Task"
    attempt: int
    trial: TrialContext
    patch: str
    work: "BatchWork | None"
    started: float


class GcpBatchProvider(GcpProvider):
    """The gcp env as `eval` and `validate` use it (registry name gcp_batch): the same settings."""

    extra_modules = ("google.cloud.batch_v1", "google.cloud.storage")

    def check(self, spec: SandboxSpec) -> None:
        if not (self.settings.image or spec.image):
            raise UserError(f"task '{spec.name}' names no image; eval on GCP Batch runs each instance's image")
        if not self.settings.batch.bucket:
            raise UserError("eval on gcp needs a GCS bucket: set environments.gcp.batch.bucket in a private --config "
                            "(`agentcompass config gcp` writes one) or pass --env-params '{\"batch\": {\"bucket\": NAME}}'")
        self._connect_batch()

    def open(self, spec: SandboxSpec) -> Any:
        raise InfraError("the gcp_batch env grades through one Batch job; it opens no sandbox")

    def _connect_batch(self) -> tuple[Any, Any, str]:
        """(credentials, project, region), once per run."""
        with self._lock:
            if getattr(self, "_batch_auth", None) is None:
                credentials, project = gcp_credentials(self.settings.project_id, self.settings.credentials_file)
                self._batch_auth = (credentials, project, self.settings.default_region)
            return self._batch_auth

    def run_trials(self, prepared: "PreparedRun", pending: list[tuple["Task", int]], store: "ResultsStore",
                   progress: "Progress") -> None:
        """The runner's seam: every pending attempt through one Batch job instead of a sandbox each."""
        if pending:
            BatchEvaluation(self, prepared, store, progress).run(pending)


class BatchEvaluation:
    def __init__(self, provider: GcpBatchProvider, prepared: "PreparedRun", store: "ResultsStore",
                 progress: "Progress") -> None:
        from google.cloud import batch_v1, storage

        from agentcompass.providers.gcp.batch import BatchJobs
        from agentcompass.providers.gcp.storage import RunBucket

        self.provider, self.prepared, self.store, self.progress = provider, prepared, store, progress
        self.settings = provider.settings
        credentials, self.project, self.region = provider._connect_batch()
        run_name = str(prepared.resolved.run.run_name)
        self.job_id = instance_name(f"ac-{label_value(run_name)[:40]}-{uuid.uuid4().hex[:8]}")
        self.bucket = RunBucket(storage.Client(project=self.project, credentials=credentials),
                                str(self.settings.batch.bucket), self.job_id)
        self.jobs = BatchJobs(batch_v1.BatchServiceClient(credentials=credentials), self.project, self.region)
        self.items: list[Item] = []  # remote ones, index = BATCH_TASK_INDEX
        self.graded: set[int] = set()
        self.stop = threading.Event()

    # -- inputs --------------------------------------------------------------------------
    def prepare(self, pending: list[tuple["Task", int]]) -> list[Item]:
        """An item per attempt; the ones with nothing to run remotely (an empty patch) are graded at once."""
        prepared = self.prepared
        submission = getattr(prepared.harness, "submission", None)
        batch_work = getattr(prepared.task_format, "batch_work", None)
        if submission is None or batch_work is None:
            raise UserError(f"harness '{prepared.resolved.harness.name}' on benchmark '{prepared.resolved.benchmark.name}' "
                            "cannot grade on GCP Batch (it needs a patch to grade without a sandbox); use --env docker")
        local: list[Item] = []
        for task, attempt in pending:
            patch = submission(task, prepared.task_format)
            if patch is None:
                raise UserError(f"harness '{prepared.resolved.harness.name}' has no submission for {task.id} on GCP Batch")
            trial_dir = self.store.fresh_trial_dir(task.id, attempt)
            trial = TrialContext(task.id, attempt, trial_dir, str(prepared.resolved.run.run_name),
                                 prepared.resolved.labels, self.stop)
            item = Item(task, attempt, trial, patch, batch_work(task, patch, trial), time.time())
            if self.settings.image and item.work is not None:
                item.work.image = self.settings.image
            (self.items if item.work is not None else local).append(item)
        return local

    def upload_inputs(self) -> None:
        """Per task: task.env (sourced by the task script) and files.tar; then the predictions and the manifest."""
        for index, item in enumerate(self.items):
            work = item.work
            assert work is not None
            q = shlex.quote
            env = " ".join(q(a) for k, v in sorted(work.env.items()) for a in ("-e", f"{k}={v}"))
            self.bucket.upload(f"inputs/{index}/task.env", "".join([
                f"IMAGE={q(work.image)}\n", f"WORKDIR={q(work.workdir)}\n", f"CONTAINER_ENV=({env})\n",
                f"COMMAND={q(work.command)}\n", f"OUTPUTS={q(work.outputs)}\n"]))
            self.bucket.upload(f"inputs/{index}/files.tar", files_tar(work.files))
        model = self.prepared.resolved.labels.get("model_name") or self.prepared.resolved.labels.get("model") or ""
        predictions = {f"{i.task.id}.{i.attempt}": {"instance_id": i.task.id, "model_name_or_path": model,
                                                    "model_patch": i.patch} for i in self.items}
        manifest = [{"index": n, "instance_id": i.task.id, "attempt": i.attempt, "image": i.work.image if i.work else ""}
                    for n, i in enumerate(self.items)]
        self.bucket.upload_inputs(predictions, manifest)

    def job(self) -> Any:
        from agentcompass.providers.gcp.batch import boot_disk_gb, job_definition, task_script

        s, batch = self.settings, self.settings.batch
        environment = {"AGENTCOMPASS_BUCKET": self.bucket.bucket_name, "AGENTCOMPASS_PREFIX": self.bucket.prefix,
                       "AGENTCOMPASS_JOB": self.job_id}
        if os.environ.get(EMULATOR_ENV):  # tests: the task script talks to the same emulated GCS
            environment["AGENTCOMPASS_GCS_ENDPOINT"] = os.environ[EMULATOR_ENV].rstrip("/")
        verify = max(int(i.task.verify_timeout_s) for i in self.items)
        labels = {label_value(k): label_value(v) for k, v in
                  {**s.labels, "agentcompass": "1", "run": str(self.prepared.resolved.run.run_name)}.items()}
        return job_definition(
            script=task_script(), task_count=len(self.items),
            parallelism=min(self.prepared.resolved.run.task_concurrency, len(self.items)),
            machine_type=batch.machine_type, cpu_milli=batch.cpu_milli, memory_mib=batch.memory_mib,
            environment=environment, labels=labels, max_run_duration_s=verify + batch.task_overhead_s,
            runner_image=batch.runner_image, vm_image=batch.vm_image, max_retry_count=batch.max_retry_count,
            spot=s.spot, service_account=s.service_account,
            boot_disk_gb=boot_disk_gb(batch.boot_disk_gb, [i.work.image for i in self.items if i.work is not None]))

    # -- the run -------------------------------------------------------------------------
    def run(self, pending: list[tuple["Task", int]]) -> None:
        from agentcompass.core.signals import (STOP_SIGNALS, Interrupted, install_handlers, raise_interrupt,
                                               restore_handlers)

        for item in self.prepare(pending):
            self.record(item, None)  # nothing to run: graded here, as `grade` does
        if not self.items:
            return
        previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
        install_handlers(STOP_SIGNALS[1:], raise_interrupt)  # SIGTERM, SIGHUP: as Ctrl-C, the job is deleted
        name = None
        try:
            self.bucket.ensure(self.settings.batch.bucket_location or self.region, self.settings.batch.blob_ttl_days)
            self.upload_inputs()
            name = f"{self.jobs.parent}/jobs/{self.job_id}"  # known before submit: an interrupt there still deletes it
            name = self.jobs.submit(self.job_id, self.job())
            print(f"gcp batch: job {name}, {len(self.items)} task(s), inputs at {self.bucket.url()}",
                  file=sys.stderr, flush=True)
            failure = ""
            try:
                self.jobs.wait(name, lambda counts: self.collect(), self.stop, self.settings.batch.job_timeout_s)
            except InfraError as exc:
                if str(exc) == "interrupted":
                    raise
                failure = str(exc)
            self.collect()
            for index, item in enumerate(self.items):
                if index not in self.graded:  # Batch gave up on it (after its own retries): the environment's fault
                    self.record_error(item, f"GCP Batch task {index} of {name} wrote no result: "
                                            f"{failure or 'the job ended without it'}")
        except KeyboardInterrupt as exc:
            self.stop.set()
            restore_handlers(previous)
            self.finish_interrupted(name)
            raise Interrupted() from exc
        except BaseException:
            restore_handlers(previous)
            self.finish(name)
            raise
        restore_handlers(previous)
        self.finish(name)

    def collect(self) -> None:
        """Grade every task that finished since the last look. A read that fails (GCS hiccup) is tried again at
        the next look; after the job, a task still without a result is an infra error."""
        try:
            finished = self.bucket.finished_tasks()
        except Exception as exc:
            log.warning("cannot list the Batch tasks' outputs; trying again", error=str(exc))
            return
        for index in sorted(finished - self.graded):
            if index >= len(self.items):
                continue
            with tempfile.TemporaryDirectory(prefix="agentcompass-batch-") as tmp:
                try:
                    self.bucket.download_outputs(Path(tmp), under=f"tasks/{index}/")
                except Exception as exc:
                    log.warning("cannot fetch a Batch task's outputs; trying again", task=index, error=str(exc))
                    continue
                self.graded.add(index)
                self.record(self.items[index], Path(tmp) / "tasks" / str(index))

    def record(self, item: Item, outputs: Path | None) -> None:
        grade = self.prepared.task_format.batch_grade(item.task, item.trial, item.patch, outputs)
        seconds = read_seconds(outputs)
        result = TrialResult(
            task_id=item.task.id, attempt=item.attempt, status="passed" if grade.passed else "failed",
            reward=grade.reward, rewards=grade.rewards, message=grade.message, agent_exit_status="completed",
            timings={"verify": seconds, "total": round(time.time() - item.started, 4)} if seconds is not None
            else {"total": round(time.time() - item.started, 4)},
            started_at=iso(item.started), finished_at=now_iso(), details=grade.details)
        self.store.record(result)
        self.progress.finished(result)

    def record_error(self, item: Item, message: str) -> None:
        result = TrialResult(task_id=item.task.id, attempt=item.attempt, status="error", error_category="infra",
                             message=message, timings={"total": round(time.time() - item.started, 4)},
                             started_at=iso(item.started), finished_at=now_iso())
        self.store.record(result)
        self.progress.finished(result)

    def finish_interrupted(self, name: str | None) -> None:
        """After Ctrl-C or SIGTERM: the same clean-up, on fresh clients (the signal may have cut a call short on the
        old ones, leaving a connection that hangs) and bounded, so the process ends within seconds; what is left
        then is said, and goes by `agentcompass cleanup --env gcp` or the bucket's lifecycle rule."""
        from google.cloud import batch_v1, storage

        from agentcompass.providers.gcp.batch import BatchJobs

        def clean() -> None:
            credentials = self.provider._connect_batch()[0]
            self.jobs = BatchJobs(batch_v1.BatchServiceClient(credentials=credentials), self.project, self.region)
            self.bucket.client, self.bucket._bucket = storage.Client(project=self.project, credentials=credentials), None
            self.finish(name)

        cleaner = threading.Thread(target=clean, name="batch-cleanup", daemon=True)
        cleaner.start()
        cleaner.join(CLEANUP_S)
        if cleaner.is_alive():
            print(f"interrupted: still deleting Batch job {name or '(not created)'} and {self.bucket.url()}; if they "
                  f"remain: agentcompass cleanup --env gcp --run-name {self.prepared.resolved.run.run_name}",
                  file=sys.stderr, flush=True)

    def finish(self, name: str | None) -> None:
        """Delete the job (its VMs go with it) and the run's blobs, unless they are to be kept."""
        if self.prepared.resolved.run.keep_environment:
            print(f"kept: Batch job {name or '(not created)'} and {self.bucket.url()}", file=sys.stderr, flush=True)
            return
        try:
            if name is not None:
                self.jobs.delete(name)
            self.bucket.delete()
        except Exception as exc:  # the verdicts stand; the bucket's lifecycle rule removes the blobs later
            log.warning("could not delete the Batch job or its blobs", job=name, error=str(exc))


def files_tar(files: dict[str, str]) -> bytes:
    """The files as a tar archive rooted at / (what `docker cp - CONTAINER:/` extracts)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for path, text in files.items():
            data = text.encode("utf-8")
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode, info.mtime = len(data), 0o755 if path.endswith(".sh") else 0o644, int(time.time())
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def read_seconds(outputs: Path | None) -> float | None:
    try:
        return float((outputs / "seconds").read_text()) if outputs is not None else None
    except (OSError, ValueError):
        return None
