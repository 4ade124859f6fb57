"""A run's files in a GCS bucket, for evaluation at scale on GCP Batch (`eval --env gcp`).

Everything of one run lives under `agentcompass/<run>/` in the bucket: the predictions and the
manifest the Batch tasks read, and `tasks/<index>/...` that each task writes back. The bucket
is created when missing, with a lifecycle rule that deletes `agentcompass/` objects after
`ttl_days`, so temporary blobs go away even if the orchestrator dies before `delete()`.
The `google-cloud-storage` SDK is imported inside the functions that use it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentcompass.core.errors import InfraError, UserError
from agentcompass.providers.remote import one_line

ROOT = "agentcompass/"


class RunBucket:
    def __init__(self, client: Any, bucket: str, run_name: str) -> None:
        self.client, self.bucket_name = client, bucket
        self.prefix = f"{ROOT}{run_name}/"
        self._bucket: Any = None

    def ensure(self, location: str, ttl_days: int) -> None:
        """The bucket, created in `location` when missing, with the lifecycle rule on agentcompass/ objects."""
        from google.api_core import exceptions as gexc

        try:
            try:
                bucket = self.client.get_bucket(self.bucket_name)
            except gexc.NotFound:
                bucket = self.client.create_bucket(self.bucket_name, location=location)
            if not any(rule.get("action", {}).get("type") == "Delete" and ROOT in rule.get("condition", {}).get("matchesPrefix", [])
                       for rule in bucket.lifecycle_rules):
                bucket.add_lifecycle_delete_rule(age=ttl_days, matches_prefix=[ROOT])
                bucket.patch()
        except (gexc.Forbidden, gexc.Unauthorized) as exc:
            raise UserError(f"GCS refused bucket '{self.bucket_name}' ({one_line(exc)[:200]}); the account needs "
                            "roles/storage.admin on it (or create it and grant roles/storage.objectAdmin)") from exc
        except gexc.GoogleAPICallError as exc:
            raise InfraError(f"GCS bucket '{self.bucket_name}': {one_line(exc)[:300]}") from exc
        self._bucket = bucket

    @property
    def bucket(self) -> Any:
        if self._bucket is None:
            self._bucket = self.client.bucket(self.bucket_name)
        return self._bucket

    def url(self, name: str = "") -> str:
        return f"gs://{self.bucket_name}/{self.prefix}{name}"

    def upload_inputs(self, predictions: dict[str, dict[str, Any]], manifest: list[dict[str, Any]]) -> None:
        """predictions.jsonl (as sb-cli takes it) and manifest.json: entry i is what Batch task i grades."""
        lines = "".join(json.dumps(p) + "\n" for p in predictions.values())
        self.bucket.blob(f"{self.prefix}predictions.jsonl").upload_from_string(lines, content_type="application/jsonl")
        self.bucket.blob(f"{self.prefix}manifest.json").upload_from_string(json.dumps(manifest, indent=1),
                                                                           content_type="application/json")

    def upload(self, name: str, data: bytes | str) -> None:
        self.bucket.blob(f"{self.prefix}{name}").upload_from_string(data, content_type="application/octet-stream")

    def finished_tasks(self) -> set[int]:
        """The indexes of the tasks that wrote `tasks/<index>/done` (their last object)."""
        done = set()
        for blob in self.client.list_blobs(self.bucket_name, prefix=f"{self.prefix}tasks/"):
            parts = blob.name[len(self.prefix):].split("/")
            if len(parts) == 3 and parts[2] == "done" and parts[1].isdigit():
                done.add(int(parts[1]))
        return done

    def download_outputs(self, local: Path, under: str = "tasks/") -> list[Path]:
        """Every object under `under` (default: what the tasks wrote), to the same relative paths under `local`."""
        written = []
        for blob in self.client.list_blobs(self.bucket_name, prefix=f"{self.prefix}{under}"):
            target = local / blob.name[len(self.prefix):]
            if ".." in Path(blob.name).parts:
                continue  # never outside `local`, whatever a task named its output
            target.parent.mkdir(parents=True, exist_ok=True)
            blob.download_to_filename(str(target))
            written.append(target)
        return written

    def delete(self) -> int:
        """Delete the run's objects; returns how many."""
        blobs = list(self.client.list_blobs(self.bucket_name, prefix=self.prefix))
        for blob in blobs:
            blob.delete()
        return len(blobs)
