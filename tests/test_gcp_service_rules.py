"""A new GCP project in its first hour, against the fake Compute client as strict as the service: each rule
the fake applies has a test that it refuses what Compute refuses (the real google.api_core types and the
service's own codes), then the provider's behaviour on it: quotas and rate limits as back-pressure,
configuration errors that stop the run in one line, VMs sized to the task, label and filter rules, OS Login."""

from __future__ import annotations

import json
from concurrent.futures import TimeoutError as Pending

import pytest

import fake_gcp
from agentcompass.core.errors import BackPressure, FatalInfraError, InfraError, UserError
from agentcompass.core.sandbox import SandboxSpec
from gcp_vms import RUN, calls, gcp_cli, provider, spec, sshd  # noqa: F401  (fixtures)
from gcp_vms import fake as fake  # noqa: F401,PLC0414  (fixture)


def insert_request(name="rules", **changes):
    """An insert request as the provider builds it, with `changes` applied to its instance."""
    from google.cloud import compute_v1

    from agentcompass.providers.gcp.provider import GcpProvider
    from agentcompass.providers.gcp.ssh import EphemeralKey

    resource = GcpProvider().instance_resource("us-central1-a", name, spec(name), EphemeralKey())
    for field, value in changes.items():
        if field == "network":
            resource.network_interfaces[0].network = value
        elif field == "labels":
            resource.labels = value
        else:
            setattr(resource, field, value)
    return compute_v1.InsertInstanceRequest(project="p", zone="us-central1-a", instance_resource=resource)


# -- the fake refuses what Compute refuses ------------------------------------------------------------
@pytest.mark.parametrize("changes, refused, text", [
    ({"machine_type": "zones/us-central1-a/machineTypes/e2-mediun"}, "BadRequest", "Machine type with name 'e2-mediun'"),
    ({"network": "global/networks/default"}, None, None),
    ({"network": "global/networks/missing"}, "NotFound", "global/networks/missing' was not found"),
    ({"labels": {"1team": "x"}}, "BadRequest", "Label key"),
    ({"labels": {"team": "Eval Crew"}}, "BadRequest", "Label key"),
])
def test_the_fake_refuses_inserts_compute_refuses(fake, changes, refused, text):  # noqa: F811
    from google.api_core import exceptions

    request = insert_request(**changes)
    if refused is None:
        fake.InstancesClient().insert(request=request).result(timeout=5)
        return
    with pytest.raises(getattr(exceptions, refused), match=text):
        fake.InstancesClient().insert(request=request)


def test_the_fake_fails_operations_on_quota_and_org_policy(fake, monkeypatch):  # noqa: F811
    from google.api_core import exceptions

    monkeypatch.setenv(fake.QUOTA_ENV, "CPUS=2")
    client = fake.InstancesClient()
    client.insert(request=insert_request("q1")).result(timeout=5)
    with pytest.raises(exceptions.Forbidden, match="Quota 'CPUS' exceeded") as quota:
        client.insert(request=insert_request("q2")).result(timeout=5)
    assert [e.code for e in quota.value.errors] == ["QUOTA_EXCEEDED"]
    monkeypatch.setenv(fake.POLICIES_ENV, "compute.vmExternalIpAccess")
    monkeypatch.setenv(fake.QUOTA_ENV, "CPUS=24")
    with pytest.raises(exceptions.PreconditionFailed, match="constraints/compute.vmExternalIpAccess"):
        client.insert(request=insert_request("q3")).result(timeout=5)


def test_the_fake_needs_parenthesised_filters_and_deletes_take_a_while(fake):  # noqa: F811
    from google.api_core import exceptions

    client = fake.InstancesClient()
    client.insert(request=insert_request("lro")).result(timeout=5)
    with pytest.raises(exceptions.BadRequest, match="filter"):
        client.aggregated_list(request={"project": "p", "filter": 'labels.agentcompass = "1" AND labels.run = "x"'})
    assert list(client.aggregated_list(request={"project": "p", "filter": '(labels.agentcompass = "1")'}))
    from google.cloud import compute_v1

    operation = client.delete(request=compute_v1.DeleteInstanceRequest(project="p", zone="us-central1-a", instance="lro"))
    with pytest.raises(Pending):
        operation.result(timeout=0)  # a long-running operation, as Compute's
    with pytest.raises(exceptions.Conflict):  # the name is not free before the delete completes
        client.insert(request=insert_request("lro"))
    operation.result(timeout=5)


# -- error classes from the service's own codes ---------------------------------------------------------
def test_errors_are_classed_by_the_services_codes():
    from google.api_core import exceptions
    from google.cloud import compute_v1

    from agentcompass.providers.gcp.api import GcpRefused, refusal

    def operation_error(status, message, code):
        return exceptions.from_http_status(status, message, errors=[compute_v1.Errors(code=code, message=message)])

    cases = [
        (operation_error(403, "Quota 'CPUS' exceeded.  Limit: 24.0 in region us-central1.", "QUOTA_EXCEEDED"), BackPressure, ""),
        (operation_error(403, "Quota 'IN_USE_ADDRESSES' exceeded.  Limit: 8.0 in region us-central1.", "QUOTA_EXCEEDED"),
         BackPressure, ""),
        (exceptions.Forbidden("Rate Limit Exceeded", errors=[{"reason": "rateLimitExceeded"}]), BackPressure, ""),
        (exceptions.TooManyRequests("slow down"), BackPressure, ""),
        (exceptions.NotFound("The resource 'projects/p/global/networks/default' was not found"), GcpRefused, "network"),
        (exceptions.BadRequest("Invalid value for field 'resource.machineType': 'zones/z/machineTypes/x'. Machine type "
                               "with name 'x' does not exist in zone 'z'."), GcpRefused, "machine_type"),
        (exceptions.NotFound("The resource 'projects/cos-cloud/global/images/family/cos-stabel' was not found"),
         GcpRefused, "vm_image_family"),
        (operation_error(412, "Constraint constraints/compute.vmExternalIpAccess violated for project p.",
                         "CONDITION_NOT_MET"), GcpRefused, "external_ip"),
        (exceptions.Forbidden("Required 'compute.instances.create' permission"), GcpRefused, "roles/compute.instanceAdmin"),
        (exceptions.ServiceUnavailable("backend error"), InfraError, ""),
    ]
    for error, kind, named in cases:
        mapped = refusal(error, "creating VM x")
        assert type(mapped) is kind, (error, mapped)
        assert named in str(mapped) and "\n" not in str(mapped)
        assert "permission denied" not in str(mapped) or kind is GcpRefused and "rate" not in str(error).lower()
    assert issubclass(GcpRefused, FatalInfraError) and issubclass(BackPressure, InfraError)


def test_a_missing_network_stops_the_run_before_the_next_trial_with_one_line(gcp_cli, tmp_path):  # noqa: F811
    run, sdk = gcp_cli("run", "demo", "oracle", "none", "--env", "gcp", "--results-dir", str(tmp_path / "out"),
                       "--run-name", RUN, "--task-concurrency", "1", "--env-params", gcp_cli.params,
                       env={fake_gcp.NETWORKS_ENV: "only-custom"})
    assert run.returncode == 2, run.stderr
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "network" in lines[0] and "gcloud compute networks" in lines[0], run.stderr
    assert sum(c["call"] == "InstancesClient.insert" for c in sdk) == 1  # not retried, not tried on the next task


def test_a_quota_is_back_pressure_and_every_trial_still_runs(gcp_cli, tmp_path):  # noqa: F811
    """CPUS quota 4 = two e2-medium VMs; provider_limit 3 asks for a third: its insert fails QUOTA_EXCEEDED, the
    env opens at most two from then on, the trial waits and runs, and no trial records an error or a retry."""
    out = tmp_path / "out"
    run, sdk = gcp_cli("run", "demo", "oracle", "none", "--env", "gcp", "--results-dir", str(out), "--run-name", RUN,
                       "--task-concurrency", "3", "--provider-limit", "3", "--env-params", gcp_cli.params,
                       env={fake_gcp.QUOTA_ENV: "CPUS=4"})
    assert run.returncode == 0, run.stderr
    assert "back-pressure: at most 2 sandbox(es) open at once" in run.stderr and "Quota 'CPUS' exceeded" in run.stderr
    [trials] = out.glob(f"{RUN}/*/trials.jsonl")
    results = [json.loads(line) for line in trials.read_text().splitlines()]
    assert {r["status"] for r in results} == {"passed"}
    [log] = out.glob(f"{RUN}/*/log.jsonl")
    retried = [json.loads(line) for line in log.read_text().splitlines() if "retrying" in line]
    assert not [r for r in retried if "Quota" in r.get("error", "")]  # a wait, never one of the trial's retries
    assert sum(c["call"] == "InstancesClient.insert" for c in sdk) >= 4


def test_a_rate_limit_is_back_pressure_not_permission_denied(fake, sshd, monkeypatch):  # noqa: F811
    monkeypatch.setenv(fake_gcp.RATE_LIMITED_ENV, "1")
    with pytest.raises(BackPressure, match="rate limit") as pressure:
        provider(sshd).open(spec("rl"))
    assert "permission denied" not in str(pressure.value)
    provider(sshd).open(spec("rl")).close()  # the limit passed: the next try goes through


def test_the_default_provider_limit_comes_from_the_regional_quotas(fake, sshd, monkeypatch):  # noqa: F811
    monkeypatch.setenv(fake_gcp.QUOTA_ENV, "CPUS=24,IN_USE_ADDRESSES=8")
    p = provider(sshd)
    p.check(spec())
    assert p.default_provider_limit == 8  # 12 e2-medium VMs fit the CPUs, 8 the external addresses
    p = provider(sshd, external_ip=False)
    p.check(spec())
    assert p.default_provider_limit == 12
    monkeypatch.setenv(fake_gcp.QUOTA_ENV, "CPUS=1")
    with pytest.raises(UserError, match="quota CPUS in us-central1 has no room"):
        provider(sshd).check(spec())


# -- sizing --------------------------------------------------------------------------------------------
def test_the_fake_vm_refuses_a_container_with_more_cpus_than_it_has(fake, sshd):  # noqa: F811
    """What an e2-medium does with `docker run --cpus=4`: exit 125 at start-up (here: the configured type pinned)."""
    p = provider(sshd)
    p._connect()
    p.machine_type_for = lambda spec: "e2-medium"  # as before sizing: the configured type whatever the task
    with pytest.raises(InfraError, match="start-up failed .*Range of CPUs"):
        p.open(spec("big", cpus=4))


def test_the_machine_type_fits_the_task(fake, sshd):  # noqa: F811
    p = provider(sshd)
    box = p.open(spec("fit", cpus=4, memory_mb=8192))
    assert box.exec("nproc").exit_code == 0
    box.close()
    p.open(spec("small", cpus=1, memory_mb=2048)).close()
    types = [c[1][0].instance_resource.machine_type.rsplit("/", 1)[1] for c in calls("InstancesClient.insert")]
    assert types == ["e2-standard-4", "e2-medium"]  # the configured one when the task fits in it
    with pytest.raises(UserError, match="needs 500 vCPUs .* no machine type"):
        p.check(spec("huge", cpus=500))
    with pytest.raises(UserError, match="machine_type 'e2-mediun' does not exist"):
        provider(sshd, machine_type="e2-mediun").check(spec())


def test_label_keys_start_with_a_letter_and_vms_get_no_service_account_unless_named():
    pytest.importorskip("google.cloud.compute_v1")
    from agentcompass.providers.gcp.provider import GcpProvider
    from agentcompass.providers.gcp.vm import label_key
    from agentcompass.providers.gcp.ssh import EphemeralKey

    assert label_key("1team") == "k-1team" and label_key("Team") == "team"
    vm = GcpProvider(labels={"1team": "x"}).instance_resource("us-central1-a", "ac-x", spec(), EphemeralKey())
    assert all(fake_gcp.LABEL_KEY.match(k) for k in vm.labels)
    assert not vm.service_accounts  # tests/test_gcp_metadata.py: what a named account gets
    named = GcpProvider(service_account="default").instance_resource("z-a", "ac-x", spec(), EphemeralKey())
    assert [a.email for a in named.service_accounts] == ["default"]


# -- OS Login ------------------------------------------------------------------------------------------
def test_an_enforced_os_login_is_detected_and_used(fake, sshd, monkeypatch):  # noqa: F811
    monkeypatch.setenv(fake_gcp.POLICIES_ENV, "compute.requireOsLogin")
    p = provider(sshd, os_login_account="runner@p.iam.gserviceaccount.com", boot_timeout_s=30)
    box = p.open(spec("osl"))
    assert box.exec("echo in").stdout == "in\n"
    box.close()
    [(_, (request,), _)] = calls("OsLoginServiceClient.import_ssh_public_key")
    assert request.parent == "users/runner@p.iam.gserviceaccount.com" and request.ssh_public_key.key.startswith("ssh-ed25519")
    [(_, (insert,), _)] = calls("InstancesClient.insert")
    metadata = {item.key: item.value for item in insert.instance_resource.metadata.items}
    assert metadata["enable-oslogin"] == "TRUE" and "ssh-keys" not in metadata


def test_without_os_login_support_an_enforced_policy_only_times_out(fake, sshd, monkeypatch):  # noqa: F811
    """The fake's guest ignores metadata keys under the policy, as GCE's does: the reason detection matters."""
    monkeypatch.setenv(fake_gcp.POLICIES_ENV, "compute.requireOsLogin")
    with pytest.raises(InfraError):
        provider(sshd, os_login=False, boot_timeout_s=3).open(spec("nologin"))


def test_sandbox_spec_labels_survive_as_gcp_labels(fake, sshd):  # noqa: F811
    box = provider(sshd).open(SandboxSpec(name=f"ac-{RUN}-lbl", image="agentcompass/base:bookworm", workdir="/app",
                                          labels={"agentcompass": "1", "run": RUN, "trial": "Task/One.1", "9x": "y"}))
    box.close()
    [(_, (request,), _)] = calls("InstancesClient.insert")
    assert dict(request.instance_resource.labels)["k-9x"] == "y"
