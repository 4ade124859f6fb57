"""`agentcompass env check gcp` (and `config gcp`): sources named, never values; APIs, firewall, bucket.

The google-cloud clients are the recording fakes of tests/fake_gcp.py in the CLI subprocess (every call
bound to the real client's signature below); GCS is an emulator on 127.0.0.1. Without credentials the
real google-auth looks for them and finds none.
"""

from __future__ import annotations

import inspect
import json
import os
from pathlib import Path

import pytest
import yaml

import fake_gcp
from gcs_emulator import emulated_gcs

pytest.importorskip("google.cloud.batch_v1", reason="pip install '.[gcp]' from the checkout")
TESTS = Path(__file__).resolve().parent
SECRET = "-----BEGIN PRIVATE KEY-----\nnot-a-real-key-5a105e8b\n-----END PRIVATE KEY-----\n"


def no_credentials_env(tmp_path: Path) -> dict[str, str]:
    """A user with no gcloud ADC file, no key variable, and no metadata server (it refuses at once)."""
    return {"HOME": str(tmp_path / "home"), "CLOUDSDK_CONFIG": str(tmp_path / "gcloud"),
            "GOOGLE_APPLICATION_CREDENTIALS": "", "GOOGLE_CLOUD_PROJECT": "",
            "GCE_METADATA_HOST": "127.0.0.1:9", "GCE_METADATA_IP": "127.0.0.1:9"}


@pytest.fixture
def fake_cli(cli, tmp_path, monkeypatch):
    """The CLI with the fake Google clients and ADC, GCS emulated; returns (result, SDK calls)."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text("import fake_gcp\nfake_gcp.install()\n")
    log = tmp_path / "sdk-calls.jsonl"
    key = tmp_path / "key.json"
    key.write_text(json.dumps({"type": "service_account", "private_key": SECRET}))
    with emulated_gcs() as host:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", host)  # this process reads the bucket too
        env = {"PYTHONPATH": os.pathsep.join([str(shim), str(TESTS), os.environ.get("PYTHONPATH", "")]),
               fake_gcp.LOG_ENV: str(log), "STORAGE_EMULATOR_HOST": host, "GOOGLE_APPLICATION_CREDENTIALS": str(key),
               "GOOGLE_CLOUD_PROJECT": ""}

        def run(*args: str, env_more: dict[str, str] | None = None, stdin: str | None = None):
            log.unlink(missing_ok=True)
            result = cli(*args, env={**env, **(env_more or {})}, stdin=stdin)
            return result, [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

        run.host = host
        yield run


def bind_all(sdk: list[dict]) -> set[str]:
    """Bind every recorded call to the real client's signature (TypeError if wrong); returns the calls seen."""
    from google.cloud import batch_v1, compute_v1

    from google.cloud import orgpolicy_v2

    real = {"ZonesClient": compute_v1.ZonesClient, "FirewallsClient": compute_v1.FirewallsClient,
            "InstancesClient": compute_v1.InstancesClient, "BatchServiceClient": batch_v1.BatchServiceClient,
            "NetworksClient": compute_v1.NetworksClient, "MachineTypesClient": compute_v1.MachineTypesClient,
            "RegionsClient": compute_v1.RegionsClient, "OrgPolicyClient": orgpolicy_v2.OrgPolicyClient}
    seen = set()
    for call in sdk:
        owner, _, method = call["call"].partition(".")
        if owner not in real:
            continue
        target = getattr(real[owner], method) if method else real[owner].__init__
        inspect.signature(target).bind(None, *call["args"], **call["kwargs"])
        seen.add(call["call"])
    return seen


def test_env_check_gcp_without_credentials_exits_1_with_guidance(cli, tmp_path):
    run = cli("env", "check", "gcp", env=no_credentials_env(tmp_path))
    assert run.returncode == 1, run.stdout + run.stderr
    assert "env gcp: not ready" in run.stdout and "no GCP credentials found" in run.stdout
    assert "gcloud auth application-default login" in run.stdout and "GOOGLE_APPLICATION_CREDENTIALS" in run.stdout
    assert "Traceback" not in run.stderr


def test_list_envs_says_gcp_is_not_ready_without_credentials(cli, tmp_path):
    listed = cli("list", "envs", env=no_credentials_env(tmp_path))
    line = next(line for line in listed.stdout.splitlines() if line.strip().startswith("gcp"))
    assert "not ready: credentials: none found" in line


def test_env_check_gcp_ready_names_sources_never_values(fake_cli):
    run, sdk = fake_cli("env", "check", "gcp", env_more={fake_gcp.FIREWALL_ENV: "1"})
    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout
    assert "env gcp: ready" in out
    assert "credentials: GOOGLE_APPLICATION_CREDENTIALS" in out and "key.json" not in out and "PRIVATE KEY" not in out
    assert f"project {fake_gcp.ADC_PROJECT} from the credentials' own project" in out
    assert "APIs answer: compute, batch, storage" in out and "firewall rule agentcompass-ssh" in out
    assert "eval bucket: none set" in out
    assert bind_all(sdk) >= {"ZonesClient.get", "FirewallsClient.list", "BatchServiceClient.list_jobs", "NetworksClient.get",
                             "MachineTypesClient.get", "RegionsClient.get", "OrgPolicyClient.get_effective_policy"}
    assert "VM service account: none (the VMs' metadata server holds no token" in out


def test_env_check_gcp_shows_quotas_os_login_and_a_missing_network(fake_cli):
    """What a new project meets in its first hour, before a run: quotas (and so the default provider_limit),
    an org policy enforcing OS Login, and an organisation without the `default` network."""
    run, _ = fake_cli("env", "check", "gcp", env_more={fake_gcp.POLICIES_ENV: "compute.requireOsLogin",
                                                       fake_gcp.QUOTA_ENV: "CPUS=24,IN_USE_ADDRESSES=4",
                                                       fake_gcp.FIREWALL_ENV: "1"})
    assert run.returncode == 0, run.stdout
    assert ("quotas in us-central1: CPUS 0 of 24 used, IN_USE_ADDRESSES 0 of 4 used: at most 4 e2-medium VMs at once "
            "(the default run.provider_limit; IN_USE_ADDRESSES decides it)") in run.stdout
    assert "OS Login: enforced by org policy compute.requireOsLogin" in run.stdout
    assert "network default: exists" in run.stdout
    run, _ = fake_cli("env", "check", "gcp", env_more={fake_gcp.NETWORKS_ENV: "other", fake_gcp.FIREWALL_ENV: "1"})
    assert run.returncode == 1 and "network default does not exist" in run.stdout, run.stdout
    assert "gcloud compute networks create default" in run.stdout


def test_env_check_gcp_names_a_disabled_api_and_a_missing_firewall_rule(fake_cli, tmp_path):
    config = tmp_path / "private.yaml"
    config.write_text("environments:\n  gcp:\n    project_id: my-proj\n    zone: europe-west4-b\n")
    run, sdk = fake_cli("env", "check", "gcp", "--config", str(config), env_more={fake_gcp.DISABLED_APIS_ENV: "batch"})
    assert run.returncode == 1, run.stdout + run.stderr
    out = run.stdout
    assert f"project my-proj from environments.gcp.project_id (environments.gcp in --config {config})" in out
    assert "the batch API does not answer for project my-proj" in out and "SERVICE_DISABLED" in out
    assert "gcloud services enable batch.googleapis.com --project my-proj" in out
    assert "gcloud compute firewall-rules create agentcompass-ssh --project my-proj --network default" in out
    [jobs] = [c for c in sdk if c["call"] == "BatchServiceClient.list_jobs"]
    assert jobs["args"][0]["parent"] == "projects/my-proj/locations/europe-west4"
    bind_all(sdk)


# -- agentcompass config gcp --------------------------------------------------------------------------
def bucket_rules(host: str, name: str) -> list[dict] | None:
    from google.api_core import exceptions
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    try:
        return list(storage.Client(project="p", credentials=AnonymousCredentials()).get_bucket(name).lifecycle_rules)
    except exceptions.NotFound:
        return None


def test_config_gcp_interactive_asks_creates_the_bucket_and_writes_a_private_file(fake_cli, tmp_path):
    output = tmp_path / "private" / "gcp.yaml"
    # project (default: the credentials'), zone, region (default: the zone's), bucket, create it? (default yes)
    answers = "\neurope-west4-b\n\nac-wizard-bucket\n\n"
    run, sdk = fake_cli("config", "gcp", "--output", str(output), stdin=answers, env_more={fake_gcp.FIREWALL_ENV: "1"})
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"GCP project [{fake_gcp.ADC_PROJECT}]" in run.stderr and "zone for VMs [us-central1-a]" in run.stderr
    assert "region for Batch jobs and the bucket [europe-west4]" in run.stderr
    assert "✓ compute API" in run.stdout and "✓ batch API" in run.stdout and "✓ SSH firewall rule: agentcompass-ssh" in run.stdout
    assert f"--config {output}" in run.stdout
    written = yaml.safe_load(output.read_text())
    assert written == {"environments": {"gcp": {"project_id": fake_gcp.ADC_PROJECT, "zone": "europe-west4-b",
                                                "region": "europe-west4", "batch": {"bucket": "ac-wizard-bucket"}}}}
    assert output.stat().st_mode & 0o777 == 0o600
    assert bucket_rules(fake_cli.host, "ac-wizard-bucket") == [
        {"action": {"type": "Delete"}, "condition": {"age": 7, "matchesPrefix": ["agentcompass/"]}}]
    bind_all(sdk)
    # The file is a working --config: env check reads the project and bucket from it.
    check, _ = fake_cli("env", "check", "gcp", "--config", str(output), env_more={fake_gcp.FIREWALL_ENV: "1"})
    assert check.returncode == 0, check.stdout
    assert "eval bucket: ac-wizard-bucket" in check.stdout and "from environments.gcp.project_id" in check.stdout


def test_config_gcp_with_flags_asks_nothing_and_lists_what_is_left(fake_cli, tmp_path):
    output = tmp_path / "gcp.yaml"
    run, _ = fake_cli("config", "gcp", "--project", "my-proj", "--zone", "asia-east1-a", "--bucket", "ac-flags",
                      "--no-create-bucket", "--yes", "--output", str(output), stdin="",
                      env_more={fake_gcp.DISABLED_APIS_ENV: "batch"})
    assert run.returncode == 1, run.stdout + run.stderr
    assert run.stderr == ""  # no prompt
    assert "gcloud services enable batch.googleapis.com --project my-proj" in run.stdout
    assert "gcloud compute firewall-rules create agentcompass-ssh --project my-proj" in run.stdout
    assert "gcloud storage buckets create gs://ac-flags --project my-proj --location asia-east1" in run.stdout
    assert yaml.safe_load(output.read_text())["environments"]["gcp"]["region"] == "asia-east1"
    assert bucket_rules(fake_cli.host, "ac-flags") is None
    again, _ = fake_cli("config", "gcp", "--yes", "--output", str(output), stdin="")
    assert again.returncode == 2 and "exists; pass --force" in again.stderr


def test_config_gcp_without_credentials_or_project_writes_nothing(cli, tmp_path):
    output = tmp_path / "gcp.yaml"
    run = cli("config", "gcp", "--yes", "--output", str(output), env=no_credentials_env(tmp_path))
    assert run.returncode == 1 and "gcloud auth application-default login" in run.stdout, run.stdout + run.stderr
    assert "pass --project ID" in run.stdout
    assert not output.exists()


def test_config_gcp_without_credentials_still_writes_the_file_for_a_given_project(cli, tmp_path):
    output = tmp_path / "gcp.yaml"
    run = cli("config", "gcp", "--yes", "--project", "my-proj", "--zone", "asia-east1-a", "--output", str(output),
              env=no_credentials_env(tmp_path))
    assert run.returncode == 1 and "gcloud auth application-default login" in run.stdout, run.stdout + run.stderr
    written = yaml.safe_load(output.read_text())["environments"]["gcp"]
    assert written == {"project_id": "my-proj", "zone": "asia-east1-a", "region": "asia-east1",
                       "batch": {"bucket": "agentcompass-my-proj"}}
    assert output.stat().st_mode & 0o777 == 0o600


def test_config_gcp_never_writes_a_shipped_file(cli, tmp_path):
    shipped = Path(__file__).resolve().parent.parent / "providers" / "gcp-private.yaml"
    run = cli("config", "gcp", "--yes", "--output", str(shipped), env=no_credentials_env(tmp_path))
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "shipped config" in run.stderr, run.stderr
    assert not shipped.exists()


# -- live GCP (opt in with --run-gcp; AGENTCOMPASS_GCP_CONFIG names the file `config gcp` wrote) --------
def live_config(request) -> list[str]:
    if not request.config.getoption("--run-gcp"):
        pytest.skip("live GCP test: opt in with --run-gcp (needs ADC, a project with the compute, batch and storage "
                    "APIs, and AGENTCOMPASS_GCP_CONFIG naming the file `agentcompass config gcp` wrote)")
    path = os.environ.get("AGENTCOMPASS_GCP_CONFIG")
    return ["--config", path] if path else []


@pytest.mark.gcp
def test_live_env_check_gcp_is_ready(request, cli):
    run = cli("env", "check", "gcp", *live_config(request))
    assert run.returncode == 0, run.stdout


@pytest.mark.gcp
def test_live_validate_swebench_on_gcp_batch(request, cli, tmp_path):
    run = cli("validate", "swebench_verified", "--env", "gcp", *live_config(request), "--results-dir", str(tmp_path),
              "--benchmark-params", json.dumps({"sample_ids": ["astropy__astropy-12907"]}), timeout=3600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "astropy__astropy-12907" in run.stdout and "ok" in run.stdout
