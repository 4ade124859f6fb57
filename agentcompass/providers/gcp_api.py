"""The Compute Engine API as the gcp provider uses it: credentials and project, operations waited
for, VMs deleted, and GCP's errors mapped onto agentcompass's (transient: infra, retried; a missing
role or quota: GcpRefused, which stops the run). The SDK is imported inside the functions."""

from __future__ import annotations

import os
import threading
import time
import uuid
from typing import Any

from agentcompass.errors import FatalInfraError, InfraError, UserError
from agentcompass.providers.remote import one_line

SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]
NO_CAPACITY = ("ZONE_RESOURCE_POOL_EXHAUSTED", "does not have enough resources")
ROLES_HINT = ("the account needs roles/compute.instanceAdmin.v1 (and roles/iam.serviceAccountUser to attach a "
              "service account) with the Compute Engine API enabled")
CREDENTIALS_HINT = ("no GCP credentials: run `gcloud auth application-default login`, set GOOGLE_APPLICATION_CREDENTIALS, "
                    "or put environments.gcp.credentials_file in a private --config file")


class GcpRefused(FatalInfraError):
    """GCP refused for want of a role or a quota: no trial can get past it, so the run stops."""


def found_credentials(credentials_file: str | None = None) -> tuple[Any, str | None]:
    """(credentials, their project or None): a key file, else Application Default Credentials."""
    import google.auth
    from google.auth import exceptions as auth_exceptions

    try:
        if credentials_file:
            return google.auth.load_credentials_from_file(credentials_file, scopes=SCOPES)
        return google.auth.default(scopes=SCOPES)
    except auth_exceptions.DefaultCredentialsError as exc:
        raise UserError(f"{CREDENTIALS_HINT} ({one_line(exc)[:150]})") from exc


def gcp_credentials(project_id: str | None = None, credentials_file: str | None = None) -> tuple[Any, str]:
    """(credentials, project): a key file from the config or ADC; project config > GOOGLE_CLOUD_PROJECT > ADC's."""
    credentials, found = found_credentials(credentials_file)
    project = project_id or os.environ.get("GOOGLE_CLOUD_PROJECT") or found
    if not project:
        raise UserError("no GCP project: set environments.gcp.project_id in a private --config file, "
                        "or GOOGLE_CLOUD_PROJECT, or `gcloud config set project NAME`")
    return credentials, project


def refusal(exc: Exception, what: str) -> InfraError:
    """Permission and quota errors stop retrying with one line naming the role or quota; the rest are infra."""
    from google.api_core import exceptions as gexc

    text = one_line(exc)[:300]
    if "QUOTA" in text.upper():
        return GcpRefused(f"{what}: GCP quota exceeded ({text}); raise the quota or lower --task-concurrency")
    if isinstance(exc, (gexc.Forbidden, gexc.PermissionDenied, gexc.Unauthenticated)):
        return GcpRefused(f"{what}: permission denied ({text}); {ROLES_HINT}")
    return InfraError(f"{what}: {text}")


def insert_failure(exc: Exception, what: str) -> str:
    """'full' for a zone out of capacity, 'again' (after a pause) for a transient error; raises the rest."""
    from google.api_core import exceptions as gexc

    if any(mark in f"{exc} {getattr(exc, 'errors', '')}" for mark in NO_CAPACITY):
        return "full"
    if isinstance(exc, (gexc.ServiceUnavailable, gexc.InternalServerError, gexc.TooManyRequests)):
        time.sleep(2.0)
        return "again"
    raise refusal(exc, what) from exc


def wait_for(operation: Any, timeout: float, stop: threading.Event) -> None:
    """Wait for an operation (the client polls it with backoff), giving up early when `stop` is set."""
    from concurrent.futures import TimeoutError as Pending

    deadline = time.monotonic() + timeout
    while True:
        try:
            operation.result(timeout=min(5.0, max(0.1, deadline - time.monotonic())))
            return
        except Pending:
            if stop.is_set() or time.monotonic() > deadline:
                raise InfraError("interrupted" if stop.is_set() else f"a GCP operation took over {timeout:.0f}s") from None


def delete_instance(instances: Any, project: str, zone: str, name: str, timeout: float) -> bool:
    """Delete a VM and wait for it to go; False when it was already gone."""
    from google.api_core import exceptions as gexc
    from google.cloud import compute_v1

    try:
        request = compute_v1.DeleteInstanceRequest(project=project, zone=zone, instance=name, request_id=str(uuid.uuid4()))
        instances.delete(request=request).result(timeout=timeout)
    except gexc.NotFound:
        return False
    except gexc.GoogleAPICallError as exc:
        raise refusal(exc, f"deleting VM {name} in {zone}") from exc
    return True
