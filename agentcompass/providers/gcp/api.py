"""The Compute Engine API as the gcp provider uses it: credentials and project, operations waited
for, VMs deleted, and GCP's errors mapped onto agentcompass's by the service's own codes (the
exception class, the REST `errors[].reason`, the ErrorInfo reason, an operation's `errors[].code`):
a quota or rate limit is back-pressure (BackPressure: wait, open fewer VMs); a setting no retry can fix
(a missing network, an unknown machine type or image family, an org policy) or a missing role stops
the run (GcpRefused) with one line naming the setting and the fix; the rest are infra errors, retried.
The SDK is imported inside the functions."""

from __future__ import annotations

import os
import threading
import time
import uuid
from typing import Any

from agentcompass.core.errors import BackPressure, FatalInfraError, InfraError, UserError
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


# Reasons and codes as Compute sends them: REST errors[].reason, ErrorInfo.reason, an operation's errors[].code.
PRESSURE = {"quotaexceeded", "ratelimitexceeded", "userratelimitexceeded", "rate_limit_exceeded", "quota_exceeded",
            "resource_operation_rate_exceeded", "operation_rate_exceeded", "resource_exhausted"}
CONFIGURATION = {"resource_not_found", "notfound", "invalid", "invalid_field_value", "invalidparameter",
                 "badrequest", "condition_not_met", "constraint_violated", "invalid_usage", "required"}
# Which setting a refused resource or policy names (searched in the message), and the fix.
SETTINGS = (
    ("constraints/compute.vmExternalIpAccess", "external_ip", "the organisation forbids external IPs: set external_ip: "
     "false and run from inside the VPC (or add a NAT)"),
    ("constraints/compute.requireOsLogin", "ssh", "the organisation enforces OS Login: `agentcompass env check gcp` "
     "says how to let the account log in"),
    ("constraints/", "an organisation policy", "ask the organisation's admin, or use a project outside the policy"),
    ("/subnetworks/", "subnetwork", "name an existing subnetwork of the network (gcloud compute networks subnets list)"),
    ("/networks/", "network", "set network (and subnetwork) to an existing VPC (gcloud compute networks list), or "
     "create it: gcloud compute networks create default --subnet-mode=auto"),
    ("machineType", "machine_type", "pick one of `gcloud compute machine-types list --zones ZONE`"),
    ("/images/", "vm_image_family", "check vm_image_family and vm_image_project (gcloud compute images "
     "describe-from-family FAMILY --project PROJECT)"),
    ("serviceAccount", "service_account", "name an existing service account the runner may act as "
     "(roles/iam.serviceAccountUser)"),
    ("/zones/", "zone", "pick a zone of `gcloud compute zones list`"),
)


def codes_of(exc: Exception) -> set[str]:
    """Every code the service attached to an error, lower-cased: REST reasons, ErrorInfo, operation codes."""
    found = {str(getattr(exc, "reason", None) or "")}
    for error in getattr(exc, "errors", None) or ():
        if isinstance(error, dict):
            found.add(str(error.get("reason") or error.get("code") or ""))
        else:  # compute_v1.Errors of a failed operation
            found.add(str(getattr(error, "code", "") or getattr(error, "reason", "") or ""))
    return {code.lower() for code in found if code}


def setting_of(text: str) -> tuple[str, str]:
    for mark, setting, fix in SETTINGS:
        if mark in text:
            return setting, fix
    return "the env settings", "check environments.gcp against `agentcompass env check gcp`"


def refusal(exc: Exception, what: str) -> InfraError:
    """GCP's error as ours, by its own codes: back-pressure, a setting or role that stops the run, or infra."""
    from google.api_core import exceptions as gexc

    text = one_line(exc)[:300]
    codes = codes_of(exc)
    if codes & PRESSURE or isinstance(exc, (gexc.TooManyRequests, gexc.ResourceExhausted)) or "Quota '" in text:
        return BackPressure(f"{what}: GCP quota or rate limit ({text}); opening fewer VMs at once and waiting. "
                            "To go faster, raise the quota (IAM & Admin > Quotas) or set run.provider_limit")
    if isinstance(exc, gexc.NotFound) or codes & CONFIGURATION or (
            isinstance(exc, (gexc.BadRequest, gexc.PreconditionFailed, gexc.FailedPrecondition)) and "SERVICE_DISABLED" not in text):
        setting, fix = setting_of(str(exc))
        return GcpRefused(f"{what}: GCP refused {setting} ({text}); {fix}")
    if isinstance(exc, (gexc.Forbidden, gexc.PermissionDenied, gexc.Unauthenticated)):
        if "SERVICE_DISABLED" in f"{text} {codes}".upper():
            return GcpRefused(f"{what}: the Compute Engine API is disabled ({text}); gcloud services enable "
                              "compute.googleapis.com")
        return GcpRefused(f"{what}: permission denied ({text}); {ROLES_HINT}")
    return InfraError(f"{what}: {text}")


def insert_failure(exc: Exception, what: str) -> str:
    """'full' for a zone out of capacity, 'again' (after a pause) for a transient error; raises the rest."""
    from google.api_core import exceptions as gexc

    if any(mark in f"{exc} {getattr(exc, 'errors', '')}" for mark in NO_CAPACITY):
        return "full"
    if isinstance(exc, (gexc.ServiceUnavailable, gexc.InternalServerError)):
        time.sleep(2.0)
        return "again"
    raise refusal(exc, what) from exc  # a quota or rate limit (TooManyRequests too) is back-pressure


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
