"""The gcp provider at the SDK boundary: a recording fake Compute client (tests/fake_gcp.py) checked against
the real client's signatures, whose "VM" is a real sshd on 127.0.0.1 next to the local Docker engine (tests/
gcp_vms.py): the VM each trial gets, insert failures, cleanup, credentials. Exec and files are in
test_gcp_sandbox.py, the CLI in test_gcp_cli.py. Live tests (`pytest --run-gcp`) need GCP credentials and a project."""

from __future__ import annotations

import inspect
import uuid

import pytest

import fake_gcp
from agentcompass.core.errors import UserError
from agentcompass.core.sandbox import SandboxSpec
from gcp_vms import RUN, calls, provider, spec, sshd  # noqa: F401  (fixtures)
from gcp_vms import fake as fake  # noqa: F401,PLC0414  (fixture)


# -- the SDK boundary -----------------------------------------------------------------------------
def test_every_sdk_call_binds_to_the_real_signature(fake, sshd, tmp_path):
    import google.auth
    from google.api_core.extended_operation import ExtendedOperation
    from google.cloud import compute_v1

    context = tmp_path / "env"
    context.mkdir()
    (context / "Dockerfile").write_text("FROM agentcompass/base:bookworm\nWORKDIR /app\n")
    p = provider(sshd)
    p.check(spec())
    box = p.open(spec(build_context=context, image=None))
    box.exec("echo hi", timeout=5)
    box.close()
    assert p.cleanup(RUN) == 0
    real = {
        "InstancesClient": fake_gcp.REAL["InstancesClient"].__init__,
        "InstancesClient.insert": compute_v1.InstancesClient.insert,
        "InstancesClient.get": compute_v1.InstancesClient.get,
        "InstancesClient.delete": compute_v1.InstancesClient.delete,
        "InstancesClient.aggregated_list": compute_v1.InstancesClient.aggregated_list,
        "ExtendedOperation.result": ExtendedOperation.result,
        "google.auth.default": fake_gcp.REAL["google.auth.default"],
        "BatchServiceClient": fake_gcp.REAL["BatchServiceClient"].__init__,  # cleanup: eval's leftover jobs
        "BatchServiceClient.list_jobs": fake_gcp.REAL["BatchServiceClient"].list_jobs,
        "MachineTypesClient": fake_gcp.REAL["MachineTypesClient"].__init__,  # sizing the VM to the task
        "MachineTypesClient.get": compute_v1.MachineTypesClient.get,
        "RegionsClient": fake_gcp.REAL["RegionsClient"].__init__,  # the regional quotas: the default provider_limit
        "RegionsClient.get": compute_v1.RegionsClient.get,
        "OrgPolicyClient": fake_gcp.REAL["OrgPolicyClient"].__init__,  # is OS Login enforced?
        "OrgPolicyClient.get_effective_policy": fake_gcp.REAL["OrgPolicyClient"].get_effective_policy,
    }
    seen = set()
    for name, args, kwargs in fake_gcp.calls:
        function = real[name]
        method = name != "google.auth.default"
        if name in ("InstancesClient", "BatchServiceClient", "MachineTypesClient", "RegionsClient", "OrgPolicyClient"):
            kwargs = {"credentials": None}
        inspect.signature(function).bind(*((None,) if method else ()), *args, **kwargs)  # TypeError if wrong
        seen.add(name)
    assert seen == set(real)
    assert google.auth.default is fake_gcp.default


def test_insert_request_carries_machine_image_labels_key_and_ttl(fake, sshd):
    box = provider(sshd, labels={"Team": "Eval Crew"}).open(spec("Req", lifetime_s=600, cpus=1, memory_mb=512,
                                                                 allow_internet=False))
    box.close()
    [(_, (request,), _)] = calls("InstancesClient.insert")
    vm = request.instance_resource
    assert (request.project, request.zone) == (fake_gcp.ADC_PROJECT, "us-central1-a")
    assert uuid.UUID(request.request_id)
    assert vm.machine_type == "zones/us-central1-a/machineTypes/e2-medium"
    assert vm.disks[0].initialize_params.source_image == "projects/cos-cloud/global/images/family/cos-stable"
    assert vm.disks[0].auto_delete and vm.disks[0].boot
    assert dict(vm.labels) == {"agentcompass": "1", "run": RUN, "trial": "req-1", "team": "eval-crew"}
    assert vm.scheduling.max_run_duration.seconds == 600 + 120  # the task's lifetime + the boot allowance
    assert vm.scheduling.instance_termination_action == "DELETE"
    metadata = {item.key: item.value for item in vm.metadata.items}
    assert metadata["ssh-keys"].startswith("root:ssh-ed25519 ")
    assert "--network none" in metadata["startup-script"] and "--cpus=1" in metadata["startup-script"]
    assert "--memory=512m" in metadata["startup-script"]
    assert vm.name == box.id and len(vm.name) <= 63
    [(_, (deleted,), _)] = calls("InstancesClient.delete")
    assert (deleted.instance, deleted.zone) == (vm.name, "us-central1-a")


def test_settings_shape_the_vm():
    pytest.importorskip("google.cloud.compute_v1")
    pytest.importorskip("paramiko")
    from agentcompass.providers.gcp.provider import GcpProvider
    from agentcompass.providers.gcp.ssh import EphemeralKey

    p = GcpProvider(spot=True, service_account="runner@p.iam.gserviceaccount.com", network="ignored",
                    git_network="coop-vpc", subnetwork="coop-sub", external_ip=False, timeout_s=900,
                    machine_type="n2-standard-8", vm_image_family="my-family", vm_image_project="my-project", disk_gb=200)
    vm = p.instance_resource("europe-west4-b", "ac-x", spec(), EphemeralKey())
    assert vm.scheduling.provisioning_model == "SPOT" and vm.scheduling.max_run_duration.seconds == 900
    assert vm.service_accounts[0].email == "runner@p.iam.gserviceaccount.com"
    interface = vm.network_interfaces[0]
    assert interface.network == "global/networks/coop-vpc"
    assert interface.subnetwork == "regions/europe-west4/subnetworks/coop-sub"
    assert list(interface.access_configs) == []  # no external address: SSH goes to the internal one
    assert vm.machine_type == "zones/europe-west4-b/machineTypes/n2-standard-8"
    assert vm.disks[0].initialize_params.source_image == "projects/my-project/global/images/family/my-family"
    assert vm.disks[0].initialize_params.disk_size_gb == 200


def test_labels_and_names_fit_gcp_rules():
    from agentcompass.providers.gcp.vm import instance_name, label_value

    long = "Run_" + "X" * 100
    assert len(label_value(long)) <= 63 and label_value(long) == label_value(long).lower()
    assert label_value(long) != label_value(long + "y")
    name = instance_name("ac-" + "a.b" * 40 + "-")
    assert len(name) <= 63 and name[0].isalpha() and not name.endswith("-") and "." not in name
    assert instance_name("9lives")[0].isalpha()


def test_zone_out_of_capacity_tries_the_next(fake, sshd, monkeypatch):
    monkeypatch.setenv(fake_gcp.EXHAUSTED_ENV, "us-central1-a")
    box = provider(sshd, zones=["us-central1-b"]).open(spec())
    assert box.zone == "us-central1-b"
    box.close()
    assert [c[1][0].zone for c in calls("InstancesClient.insert")] == ["us-central1-a", "us-central1-b"]


def test_a_transient_failure_is_retried_as_a_new_request(fake, sshd, monkeypatch):
    monkeypatch.setenv(fake_gcp.FLAKY_ENV, "1")
    provider(sshd).open(spec()).close()
    first, second = [c[1][0] for c in calls("InstancesClient.insert")]
    assert first.zone == second.zone and first.request_id != second.request_id


def test_every_zone_full_is_an_infra_error(fake, sshd, monkeypatch):
    from agentcompass.core.errors import InfraError

    monkeypatch.setenv(fake_gcp.EXHAUSTED_ENV, "us-central1-a,us-central1-b")
    with pytest.raises(InfraError, match="no capacity") as err:
        provider(sshd, zones=["us-central1-b"]).open(spec())
    assert err.value.retryable


def test_permission_denied_is_not_retried_and_names_the_role(fake, sshd, monkeypatch):
    from agentcompass.providers.gcp.api import GcpRefused

    monkeypatch.setenv(fake_gcp.DENIED_ENV, "1")
    with pytest.raises(GcpRefused, match="roles/compute.instanceAdmin.v1") as err:
        provider(sshd).open(spec())
    assert not err.value.retryable and "\n" not in str(err.value)


def test_a_stale_vm_of_the_same_trial_is_replaced(fake, sshd):
    p = provider(sshd)
    p.open(spec())
    new = p.open(spec())
    assert len(calls("InstancesClient.delete")) == 1
    new.close()
    assert fake_gcp.vms == {}


def test_a_failed_start_up_deletes_the_vm(fake, sshd):
    from agentcompass.core.errors import InfraError

    with pytest.raises(InfraError, match="start-up failed"):
        provider(sshd).open(spec(image="agentcompass-no-such/image:never"))
    assert fake_gcp.vms == {} and len(calls("InstancesClient.delete")) == 1


def test_cleanup_deletes_labelled_vms(fake, sshd):
    p = provider(sshd)
    p.open(spec("a"))
    p.open(SandboxSpec(name=f"ac-{RUN}-other", image="agentcompass/base:bookworm", labels={"agentcompass": "1", "run": "other"}))
    assert p.cleanup(RUN) == 1
    assert [vm.instance.labels["run"] for vm in fake_gcp.vms.values()] == ["other"]
    assert calls("InstancesClient.aggregated_list")[-1][1][0]["filter"] == f'(labels.agentcompass = "1") AND (labels.run = "{RUN}")'


def batch_job(job_id: str, **labels: str) -> str:
    """A job a killed `eval` left in the fake Batch service (as gcp/eval.py labels it: agentcompass=1, run=NAME)."""
    from google.cloud import batch_v1

    name = f"projects/{fake_gcp.ADC_PROJECT}/locations/us-central1/jobs/{job_id}"
    fake_gcp.BatchServiceClient.jobs[name] = batch_v1.Job(name=name, labels=labels)
    return name


def test_cleanup_deletes_labelled_batch_jobs(fake, sshd, monkeypatch):
    monkeypatch.setattr(fake_gcp.BatchServiceClient, "jobs", {})
    mine = batch_job("ac-gone-run-1", agentcompass="1", run="gone-run")
    other = batch_job("ac-other-2", agentcompass="1", run="other")
    foreign = batch_job("someone-elses", run="gone-run")  # no agentcompass label: never ours to delete
    p = provider(sshd)
    assert p.cleanup("Gone.Run") == 1
    assert sorted(fake_gcp.BatchServiceClient.jobs) == sorted([other, foreign])
    assert p.cleanup() == 1
    assert list(fake_gcp.BatchServiceClient.jobs) == [foreign]
    assert [c[2]["name"] for c in calls("BatchServiceClient.delete_job")] == [mine, other]
    listed = calls("BatchServiceClient.list_jobs")
    assert [c[2]["parent"] for c in listed] == [f"projects/{fake_gcp.ADC_PROJECT}/locations/us-central1"] * 2
    for _, args, kwargs in calls("BatchServiceClient.delete_job"):
        inspect.signature(fake_gcp.REAL["BatchServiceClient"].delete_job).bind(None, *args, **kwargs)  # TypeError if wrong


def test_cleanup_with_the_batch_api_off_deletes_vms_only(fake, sshd, monkeypatch):
    monkeypatch.setattr(fake_gcp.BatchServiceClient, "jobs", {})
    monkeypatch.setenv(fake_gcp.DISABLED_APIS_ENV, "batch")
    p = provider(sshd)
    p.open(spec("a"))
    assert p.cleanup(RUN) == 1 and fake_gcp.vms == {}


# -- credentials ----------------------------------------------------------------------------------
def test_project_precedence(fake, sshd, monkeypatch):
    from agentcompass.providers.gcp.api import gcp_credentials

    assert gcp_credentials()[1] == fake_gcp.ADC_PROJECT
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "env-project")
    assert gcp_credentials()[1] == "env-project"
    assert gcp_credentials(project_id="config-project")[1] == "config-project"


def test_missing_credentials_are_one_line(fake, sshd, monkeypatch):
    monkeypatch.setenv(fake_gcp.NO_ADC_ENV, "1")
    with pytest.raises(UserError, match="application-default login") as err:
        provider(sshd).check(spec())
    assert "\n" not in str(err.value)



def test_storage_mb_sizes_the_boot_disk():
    pytest.importorskip("google.cloud.compute_v1")
    pytest.importorskip("paramiko")
    from agentcompass.providers.gcp.provider import GcpProvider
    from agentcompass.providers.gcp.ssh import EphemeralKey

    def disk(storage_mb, **settings):
        vm = GcpProvider(**settings).instance_resource("us-central1-a", "ac-x", spec(storage_mb=storage_mb), EphemeralKey())
        return vm.disks[0].initialize_params.disk_size_gb

    assert disk(None) == 50 and disk(10240) == 50  # the default disk holds 10 GB beside the OS and the image
    assert disk(100 * 1024) == 120  # 100 GB for the task, 20 for the OS and the image
    assert disk(100 * 1024, disk_gb=500) == 500


# -- live GCP (opt in) ------------------------------------------------------------------------------
@pytest.mark.gcp
def test_live_gcp_vm_round_trip(request, tmp_path):
    from agentcompass.providers.gcp.provider import GcpProvider

    if not request.config.getoption("--run-gcp"):
        pytest.skip("live GCP test: opt in with --run-gcp (needs ADC and a project with the Compute API)")
    p = GcpProvider(timeout_s=1800)
    s = SandboxSpec(name=f"ac-live-{uuid.uuid4().hex[:8]}", workdir="/app", image="python:3.11-slim",
                    allow_internet=False, labels={"agentcompass": "1", "run": "live-test"})
    p.check(s)
    box = p.open(s)
    try:
        result = box.exec("echo hi; echo err >&2; exit 3")
        assert (result.exit_code, result.stdout, result.stderr) == (3, "hi\n", "err\n")
        slow = box.exec("sleep 120", timeout=3)
        assert slow.timed_out and slow.exit_code == 124
        (tmp_path / "d").mkdir()
        (tmp_path / "d" / "f.txt").write_text("payload\n")
        box.upload(tmp_path / "d", "/app/d")
        box.download("/app/d", tmp_path / "back")
        assert (tmp_path / "back" / "f.txt").read_text() == "payload\n"
    finally:
        box.close()
    assert p.cleanup("live-test") == 0
