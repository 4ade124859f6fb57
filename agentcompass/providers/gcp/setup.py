"""GCP readiness and set-up checks, shared by `agentcompass env check gcp` and `agentcompass config gcp`:
where the credentials and the project come from (sources, never secret values), whether the APIs the
gcp env uses answer (compute, batch, storage), whether a firewall rule lets SSH reach the VMs, and the
bucket for evaluation on Batch. The google-cloud SDKs are imported inside the functions."""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentcompass.providers.remote import one_line
from agentcompass.core.readiness import Readiness

SDK_MODULES = ("google.cloud.compute_v1", "google.cloud.batch_v1", "google.cloud.storage", "paramiko")
APIS = {"compute": "compute.googleapis.com", "batch": "batch.googleapis.com", "storage": "storage.googleapis.com"}
CREDENTIAL_STEPS = (
    "run `gcloud auth application-default login` (writes gcloud's ADC file)",
    "or export GOOGLE_APPLICATION_CREDENTIALS=/path/to/service-account-key.json",
    "or put environments: {gcp: {credentials_file: /path/to/key.json}} in a private file and pass --config FILE",
)
PROJECT_STEPS = ("set environments.gcp.project_id in a private --config file (`agentcompass config gcp` writes one), "
                 "or export GOOGLE_CLOUD_PROJECT, or `gcloud config set project NAME`",)


def adc_file() -> Path:
    """gcloud's Application Default Credentials file (CLOUDSDK_CONFIG moves it)."""
    root = os.environ.get("CLOUDSDK_CONFIG") or Path.home() / ".config" / "gcloud"
    return Path(root) / "application_default_credentials.json"


def credentials_source(credentials_file: str | None, config_source: str = "") -> str | None:
    """Where google-auth would find credentials, without reading them; None when no file source exists
    (only the metadata server remains, which a live check asks)."""
    if credentials_file:
        return f"credentials_file from {config_source or 'environments.gcp'}" + ("" if Path(credentials_file).is_file()
                                                                              else " (the file does not exist)")
    if os.environ.get("GOOGLE_APPLICATION_CREDENTIALS"):
        exists = Path(os.environ["GOOGLE_APPLICATION_CREDENTIALS"]).is_file()
        return "GOOGLE_APPLICATION_CREDENTIALS" + ("" if exists else " (the file it names does not exist)")
    if adc_file().is_file():
        return f"gcloud's application default credentials ({adc_file()})"
    return None


def project_source(project_id: str | None, config_source: str = "") -> tuple[str | None, str]:
    if project_id:
        return project_id, f"environments.gcp.project_id ({config_source or 'the env settings'})"
    if os.environ.get("GOOGLE_CLOUD_PROJECT"):
        return os.environ["GOOGLE_CLOUD_PROJECT"], "GOOGLE_CLOUD_PROJECT"
    return None, "the credentials' own project"


def on_compute_engine() -> bool:
    """A Compute Engine VM, whose metadata server has credentials (the check without the network)."""
    try:
        return "Google" in Path("/sys/class/dmi/id/product_name").read_text()
    except OSError:
        return False


@dataclass
class Probe:
    name: str
    ok: bool
    detail: str = ""


def probe_apis(credentials: Any, project: str, zone: str, region: str) -> list[Probe]:
    """One cheap call per API; a disabled API says so in its error (SERVICE_DISABLED)."""
    from google.cloud import batch_v1, compute_v1, storage

    calls = {
        "compute": lambda: compute_v1.ZonesClient(credentials=credentials).get(project=project, zone=zone),
        "batch": lambda: next(iter(batch_v1.BatchServiceClient(credentials=credentials).list_jobs(
            request=batch_v1.ListJobsRequest(parent=f"projects/{project}/locations/{region}", page_size=1))), None),
        "storage": lambda: next(iter(storage.Client(project=project, credentials=credentials).list_buckets(max_results=1)),
                                None),
    }
    probes = []
    for name, call in calls.items():
        try:
            call()
            probes.append(Probe(name, True))
        except Exception as exc:  # any refusal is this API's state, reported as such
            probes.append(Probe(name, False, one_line(exc)[:200]))
    return probes


def ssh_firewall_rule(credentials: Any, project: str, network: str, tags: list[str]) -> str | None:
    """The name of an enabled ingress rule on `network` allowing tcp:22 to the VMs' tags (or to all), else None."""
    from google.cloud import compute_v1

    for rule in compute_v1.FirewallsClient(credentials=credentials).list(project=project):
        if rule.disabled or rule.direction != "INGRESS" or not rule.network.endswith(f"/networks/{network}"):
            continue
        if rule.target_tags and not set(rule.target_tags) & set(tags):
            continue
        for allowed in rule.allowed:
            if allowed.I_p_protocol in ("tcp", "all") and (not allowed.ports or any(
                    p == "22" or ("-" in p and int(p.split("-")[0]) <= 22 <= int(p.split("-")[1])) for p in allowed.ports)):
                return str(rule.name)
    return None


def firewall_step(project: str, network: str, tags: list[str]) -> str:
    return (f"gcloud compute firewall-rules create agentcompass-ssh --project {project} --network {network} "
            f"--direction INGRESS --allow tcp:22 --target-tags {','.join(tags)} --source-ranges YOUR_IP/32")


def gcp_readiness(settings: Any, live: bool, config_source: str = "") -> Readiness:
    """What `env check gcp` prints: each source in use, then (live) credentials, APIs, firewall and bucket."""
    report = Readiness()
    missing = [m for m in SDK_MODULES if importlib.util.find_spec(m.rpartition(".")[0] or m) is None
               or importlib.util.find_spec(m) is None]
    if missing:
        from agentcompass.core.install import pip_install

        return report.fail(f"the GCP SDKs are not installed ({', '.join(missing)})", pip_install("gcp"))
    source = credentials_source(settings.credentials_file, config_source)
    project, project_from = project_source(settings.project_id, config_source)
    region = settings.region or settings.zone.rsplit("-", 1)[0]
    report.facts.append(f"zone {settings.zone}, region {region}, machine type {settings.machine_type}")
    if not live:
        if source is not None:
            report.facts.append(f"credentials: {source}")
        elif on_compute_engine():
            report.facts.append("credentials: the metadata server (this machine is a Compute Engine VM)")
        else:
            report.fail("credentials: none found", *CREDENTIAL_STEPS)
        return report
    from agentcompass.core.errors import UserError
    from agentcompass.providers.gcp.api import gcp_credentials

    try:
        credentials, project = gcp_credentials(settings.project_id, settings.credentials_file)
    except UserError as exc:
        if "no GCP project" in str(exc):
            return report.fail(f"credentials: {source or 'the metadata server'}; no project", *PROJECT_STEPS)
        return report.fail("no GCP credentials found (no key file, no gcloud ADC, no metadata server)", *CREDENTIAL_STEPS)
    report.facts.append(f"credentials: {source or 'the metadata server (Application Default Credentials)'}")
    report.facts.append(f"project {project} from {project_from}")
    disabled = [p for p in probe_apis(credentials, project, settings.zone, region) if not p.ok]
    for probe in disabled:
        report.fail(f"the {probe.name} API does not answer for project {project}: {probe.detail}")
    if disabled:
        report.steps.append(f"gcloud services enable {' '.join(APIS[p.name] for p in disabled)} --project {project}, "
                            "and check the account's roles (compute.instanceAdmin.v1, batch.jobsEditor, storage.admin, "
                            "iam.serviceAccountUser)")
    else:
        report.facts.append("APIs answer: compute, batch, storage")
    network = settings.git_network or settings.network
    vm_checks(report, credentials, project, settings, region, network)
    try:
        rule = ssh_firewall_rule(credentials, project, network, list(settings.network_tags))
    except Exception as exc:  # the compute API's own failure is reported above
        report.facts.append(f"cannot list firewall rules: {one_line(exc)[:150]}")
        rule = None
    if rule:
        report.facts.append(f"SSH to the VMs: firewall rule {rule}")
    else:
        report.fail(f"no firewall rule lets SSH (tcp:22) reach VMs tagged {', '.join(settings.network_tags)} on network "
                    f"{network} (needed by `run --env gcp`)", firewall_step(project, network, list(settings.network_tags)))
    bucket = settings.batch.bucket
    report.facts.append(f"eval bucket: {bucket}" if bucket else
                        "eval bucket: none set (eval on gcp needs environments.gcp.batch.bucket; `agentcompass config gcp` "
                        "creates one)")
    return report


def vm_checks(report: Readiness, credentials: Any, project: str, settings: Any, region: str, network: str) -> None:
    """What `run --env gcp` would meet at its first VM: the network, the machine type, the regional quotas
    (and so the default provider_limit) and an enforced OS Login."""
    from google.api_core import exceptions as gexc
    from google.cloud import compute_v1

    from agentcompass.providers.gcp.oslogin import CONSTRAINT, os_login_enforced
    from agentcompass.providers.gcp.sizing import Sizing, describe_quotas, quota_limit, region_quotas

    try:
        compute_v1.NetworksClient(credentials=credentials).get(project=project, network=network.rsplit("/", 1)[-1])
        report.facts.append(f"network {network}: exists")
    except gexc.NotFound:
        report.fail(f"network {network} does not exist in project {project} (many organisations have no 'default')",
                    f"set environments.gcp.network to one of `gcloud compute networks list --project {project}`, or "
                    f"gcloud compute networks create {network} --subnet-mode=auto --project {project}")
    except gexc.GoogleAPICallError as exc:
        report.facts.append(f"network {network}: cannot tell ({one_line(exc)[:150]})")
    kind = Sizing(credentials, project, settings.zone).lookup(settings.machine_type)
    if kind is None:
        report.fail(f"machine type {settings.machine_type} does not exist in zone {settings.zone}",
                    f"pick one of `gcloud compute machine-types list --zones {settings.zone}`")
        return
    report.facts.append(f"machine type {kind.name}: {kind.cpus} vCPUs, {kind.memory_mb} MiB (a task that needs more "
                        "gets the smallest e2/n2 type it fits in)")
    try:
        quotas = region_quotas(credentials, project, region)
    except gexc.GoogleAPICallError as exc:
        report.facts.append(f"regional quotas: cannot read them ({one_line(exc)[:150]})")
    else:
        room, metric = quota_limit(quotas, kind.cpus, settings.external_ip)
        if metric and room == 0:
            report.fail(f"quotas in {region}: {describe_quotas(quotas)}: no room for one more {kind.name} VM",
                        "free some, or raise the quota (IAM & Admin > Quotas)")
        elif metric:
            report.facts.append(f"quotas in {region}: {describe_quotas(quotas)}: at most {room} {kind.name} VMs at once "
                                f"(the default run.provider_limit; {metric} decides it)")
    enforced = os_login_enforced(credentials, project)
    if settings.os_login or enforced:
        report.facts.append(f"OS Login: {'enforced by org policy ' + CONSTRAINT if enforced else 'on (os_login: true)'}; "
                            "the run imports its SSH key into the account's OS Login profile (needs "
                            "roles/compute.osAdminLogin)")
    else:
        report.facts.append("OS Login: not enforced" if enforced is False else
                            f"OS Login: cannot read the org policy {CONSTRAINT} (assumed off; set os_login: true if on)")
    account = settings.service_account
    report.facts.append(f"VM service account: {account if account != 'default' else 'the Compute default'} "
                        f"(scopes: {', '.join(s.rsplit('/', 1)[-1] for s in settings.service_account_scopes) or 'none'})"
                        if account and account.lower() != "none" else
                        "VM service account: none (the VMs' metadata server holds no token; name one to pull private images)")
