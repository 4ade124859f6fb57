"""The gcp provider at the SDK boundary: a recording fake Compute client (tests/fake_gcp.py)
checked against the real client's signatures, whose "VM" is a real sshd on 127.0.0.1 next to
the local Docker engine, so exec, files, timeouts and close go through the real SSH path and
`docker exec`. Live tests (`pytest --run-gcp`) need GCP credentials and a project."""

from __future__ import annotations

import inspect
import signal
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

import fake_gcp
from agentcompass.core.errors import UserError
from agentcompass.core.sandbox import TRUNCATION_MARK, SandboxSpec
from conftest import IN_CI
from harbor_factory import add_toml, make_recipe, make_sidecar_task, make_task, schema_fixtures

TESTS = Path(__file__).resolve().parent
SSHD = "/usr/sbin/sshd"
RUN = f"pytest-gcp-{uuid.uuid4().hex[:8]}"  # the label of every container these tests start


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def sshd(tmp_path_factory, base_image):
    """A real sshd on 127.0.0.1 with a throwaway host key; the fake VMs' keys go to its authorized_keys."""
    if not os.path.exists(SSHD) or os.geteuid() != 0:
        reason = "needs openssh-server (apt-get install openssh-server) and root"
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)
    pytest.importorskip("paramiko")
    home = tmp_path_factory.mktemp("sshd")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(home / "host_key")], check=True)
    keys = home / "authorized_keys"
    keys.touch(mode=0o600)
    port = free_port()
    config = home / "sshd_config"
    config.write_text(f"Port {port}\nListenAddress 127.0.0.1\nHostKey {home / 'host_key'}\nPidFile {home / 'pid'}\n"
                      f"AuthorizedKeysFile {keys}\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
                      "UsePAM no\nPermitRootLogin prohibit-password\nStrictModes no\nMaxSessions 100\nMaxStartups 100\n")
    Path("/run/sshd").mkdir(exist_ok=True)
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stderr=subprocess.PIPE)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    yield {"port": port, "keys": str(keys)}
    proc.terminate()
    proc.wait(10)


@pytest.fixture
def fake(monkeypatch, sshd):
    """The fake Compute client in place of the real one; ADC answers with anonymous credentials."""
    pytest.importorskip("google.cloud.compute_v1")
    fake_gcp.reset()
    monkeypatch.setenv(fake_gcp.KEYS_ENV, sshd["keys"])
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    fake_gcp.install_into(monkeypatch)
    yield fake_gcp
    fake_gcp.destroy_all()
    subprocess.run(f"docker ps -aq --filter label=run={RUN} | xargs -r docker rm -f -v", shell=True, capture_output=True)


def settings(sshd, **more):
    return {"ssh_port": sshd["port"], "ssh_user": "root", "sudo": False, "boot_timeout_s": 120, **more}


def provider(sshd, **more):
    from agentcompass.providers.gcp.provider import GcpProvider

    return GcpProvider(**settings(sshd, **more))


def spec(name="t1", **kw) -> SandboxSpec:
    kw.setdefault("image", "agentcompass/base:bookworm")
    return SandboxSpec(name=f"ac-{RUN}-{name}", workdir="/app", labels={"agentcompass": "1", "run": RUN, "trial": f"{name}.1"},
                       **kw)


def calls(name: str) -> list[tuple]:
    return [c for c in fake_gcp.calls if c[0] == name]


def containers() -> list[str]:
    out = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=run={RUN}"], capture_output=True, text=True, check=True)
    return out.stdout.split()


def top(container: str) -> str:
    return subprocess.run(["docker", "top", container], capture_output=True, text=True).stdout


@pytest.fixture
def sandbox(fake, sshd):
    box = provider(sshd).open(spec())
    yield box
    box.close()


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
    from agentcompass.providers.gcp.provider import instance_name, label_value

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


# -- exec and files over real SSH -------------------------------------------------------------------
def test_exec_runs_in_the_task_container(sandbox):
    result = sandbox.exec('echo "$GREETING from $(pwd)"; echo oops >&2; exit 3', env={"GREETING": "hi"}, cwd="/tmp")
    assert (result.exit_code, result.stdout, result.stderr, result.timed_out) == (3, "hi from /tmp\n", "oops\n", False)
    assert sandbox.exec("id -un", user="nobody").stdout == "nobody\n"
    inside = sandbox.exec("cat /proc/1/cgroup; hostname").stdout
    assert subprocess.run(["docker", "inspect", "-f", "{{.Config.Hostname}}", sandbox.id], capture_output=True,
                          text=True).stdout.strip() in inside


def test_exec_timeout_kills_the_command_and_what_it_forked(sandbox):
    started = time.monotonic()
    result = sandbox.exec("(sleep 2; touch /app/late) & echo started; sleep 60", timeout=1)
    assert (result.exit_code, result.timed_out, result.stdout) == (124, True, "started\n")
    assert time.monotonic() - started < 10
    time.sleep(2.5)
    assert sandbox.exec("test -e /app/late").exit_code == 1  # the background child died too
    assert sandbox.exec("ps -eo args | grep -c '[s]leep 60'").stdout.strip() == "0"


def test_exec_output_is_capped(fake, sshd):
    box = provider(sshd, output_cap_bytes=1000).open(spec())
    result = box.exec("head -c 100000 /dev/zero | tr '\\0' a")
    box.close()
    assert result.exit_code == 0 and result.stdout == "a" * 1000 + TRUNCATION_MARK


def test_upload_and_download_files_and_directories(sandbox, tmp_path):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "a.txt").write_text("alpha\n")
    (src / "run.sh").write_text("echo ran\n")
    (src / "run.sh").chmod(0o755)
    sandbox.upload(src, "/tests")
    sandbox.upload(src / "sub" / "a.txt", "/deep/new/b.txt")
    assert sandbox.exec("/tests/run.sh && cat /tests/sub/a.txt /deep/new/b.txt").stdout == "ran\nalpha\nalpha\n"
    sandbox.exec("mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt && head -c 3000000 /dev/urandom > /logs/verifier/big")
    sandbox.download("/logs/verifier", tmp_path / "verifier")
    sandbox.download("/deep/new/b.txt", tmp_path / "b.txt")
    assert (tmp_path / "verifier" / "reward.txt").read_text() == "1\n"
    assert (tmp_path / "verifier" / "big").stat().st_size == 3000000
    assert (tmp_path / "b.txt").read_text() == "alpha\n"
    with pytest.raises(FileNotFoundError):
        sandbox.download("/logs/agent/missing.json", tmp_path / "missing.json")


def test_close_deletes_the_vm_and_its_container_once(fake, sshd):
    box = provider(sshd).open(spec())
    assert containers() != []
    box.close()
    box.close()
    assert len(calls("InstancesClient.delete")) == 1 and containers() == []
    from agentcompass.core.errors import InfraError

    with pytest.raises(InfraError, match="closed"):
        box.exec("true")


def test_cleanup_deletes_labelled_vms(fake, sshd):
    p = provider(sshd)
    p.open(spec("a"))
    p.open(SandboxSpec(name=f"ac-{RUN}-other", image="agentcompass/base:bookworm", labels={"agentcompass": "1", "run": "other"}))
    assert p.cleanup(RUN) == 1
    assert [vm.instance.labels["run"] for vm in fake_gcp.vms.values()] == ["other"]
    assert calls("InstancesClient.aggregated_list")[-1][1][0]["filter"] == f'(labels.agentcompass = "1") AND (labels.run = "{RUN}")'


def batch_job(job_id: str, **labels: str) -> str:
    """A job a killed `eval` left in the fake Batch service (as gcp_eval labels it: agentcompass=1, run=NAME)."""
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


# -- the CLI, with the fake client in the subprocess -------------------------------------------------
@pytest.fixture
def gcp_cli(cli, fake, sshd, tmp_path):
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text("import fake_gcp\nfake_gcp.install()\n")
    log = tmp_path / "sdk-calls.jsonl"
    base = {"PYTHONPATH": os.pathsep.join([str(shim), str(TESTS), os.environ.get("PYTHONPATH", "")]),
            fake_gcp.LOG_ENV: str(log), fake_gcp.KEYS_ENV: sshd["keys"]}
    params = json.dumps(settings(sshd))

    def run(*args: str, env: dict[str, str] | None = None):
        result = cli(*args, env={**base, **(env or {})})
        sdk = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        return result, sdk

    run.params, run.env = params, base
    return run


@pytest.mark.parametrize("harness", ["oracle", "nop"])
def test_demo_end_to_end_over_ssh(gcp_cli, tmp_path, harness):
    results = tmp_path / "results"
    run, sdk = gcp_cli("run", "demo", harness, "none", "--env", "gcp", "--results-dir", str(results), "--run-name", RUN,
                       "--env-params", gcp_cli.params)
    assert run.returncode == 0, run.stderr
    [summary] = results.glob(f"{RUN}/*/summary.json")
    data = json.loads(summary.read_text())
    assert data["passed"] == (6 if harness == "oracle" else 0), data
    inserts = [c for c in sdk if c["call"] == "InstancesClient.insert"]
    deletes = {c["args"][0]["instance"] for c in sdk if c["call"] == "InstancesClient.delete"}
    # One VM per try: a try that met an infra error (a legacy-builder race on the shared engine, say) was retried
    # on a new VM; every VM is deleted.
    retries = sum(json.loads(line)["retries"] for line in summary.with_name("trials.jsonl").read_text().splitlines())
    assert data["errors"] == 0, data
    assert len(inserts) == 6 + retries and deletes == {c["args"][0]["instance_resource"]["name"] for c in inserts}
    assert containers() == []
    key = inserts[0]["args"][0]["instance_resource"]["metadata"]["items"]
    public = next(item["value"] for item in key if item["key"] == "ssh-keys").split()[1]
    for path in results.rglob("*"):
        if path.is_file():
            assert public not in path.read_text(errors="replace"), path


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupt_deletes_every_vm(gcp_cli, tmp_path, sig):
    dataset, config_dir = tmp_path / "data", tmp_path / "conf"
    for i in range(3):
        make_task(dataset, f"slow-{i}", solve="sleep 60", test="echo 1 > /logs/verifier/reward.txt", agent_timeout=120)
    make_recipe(config_dir, "slowbench", dataset, runs_on_host=False)
    log = tmp_path / "sdk-calls.jsonl"
    params = json.dumps({**json.loads(gcp_cli.params), "image": "agentcompass/base:bookworm"})
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentcompass", "run", "slowbench", "oracle", "none", "--env", "gcp", "--config-dir",
         str(config_dir), "--results-dir", str(tmp_path / "out"), "--run-name", RUN, "--task-concurrency", "3",
         "--env-params", params], env={**os.environ, **gcp_cli.env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and sum("sleep 60" in top(c) for c in containers()) < 3:
        time.sleep(0.2)  # wait until every VM is up and its agent is inside `sleep 60`
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    sdk = [json.loads(line) for line in log.read_text().splitlines()]
    inserted = {c["args"][0]["instance_resource"]["name"] for c in sdk if c["call"] == "InstancesClient.insert"}
    deleted = [c["args"][0]["instance"] for c in sdk if c["call"] == "InstancesClient.delete"]
    assert len(inserted) == 3 and sorted(deleted) == sorted(inserted)
    assert containers() == []


def test_interrupt_while_vms_boot_ends_within_seconds(gcp_cli, tmp_path):
    log = tmp_path / "sdk-calls.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentcompass", "run", "demo", "oracle", "none", "--env", "gcp", "--results-dir",
         str(tmp_path / "out"), "--run-name", RUN, "--task-concurrency", "3", "--env-params", gcp_cli.params],
        env={**os.environ, **gcp_cli.env, fake_gcp.BOOT_DELAY_ENV: "300"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (log.exists() and log.read_text().count('"InstancesClient.get"') >= 3):
        time.sleep(0.2)  # three VMs inserted, each booting for five minutes
    time.sleep(1)
    proc.send_signal(signal.SIGINT)
    started = time.monotonic()
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert time.monotonic() - started < 15
    sdk = [json.loads(line) for line in log.read_text().splitlines()]
    inserted = {c["args"][0]["instance_resource"]["name"] for c in sdk if c["call"] == "InstancesClient.insert"}
    deleted = [c["args"][0]["instance"] for c in sdk if c["call"] == "InstancesClient.delete"]
    assert len(inserted) == 3 and sorted(deleted) == sorted(inserted)


@pytest.mark.parametrize("missing", [fake_gcp.NO_ADC_ENV, fake_gcp.DENIED_ENV])
def test_no_credentials_or_permission_exit_2_with_one_line(gcp_cli, tmp_path, missing):
    run, sdk = gcp_cli("run", "demo", "oracle", "none", "--env", "gcp", "--results-dir", str(tmp_path / "out"),
                       "--env-params", gcp_cli.params, env={missing: "1"})
    assert run.returncode == 2, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1
    assert ("application-default login" if missing == fake_gcp.NO_ADC_ENV else "roles/compute.instanceAdmin.v1") in run.stderr
    assert not (tmp_path / "out").exists()
    assert not any(c["call"] == "InstancesClient.insert" for c in sdk)


def test_a_permission_missing_mid_run_stops_the_run_with_one_line(gcp_cli, tmp_path):
    run, sdk = gcp_cli("run", "demo", "oracle", "none", "--env", "gcp", "--results-dir", str(tmp_path / "out"),
                       "--run-name", RUN, "--task-concurrency", "1", "--env-params", gcp_cli.params,
                       env={fake_gcp.DENIED_INSERT_ENV: "1"})
    assert run.returncode == 2, run.stderr
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, run.stderr
    line = lines[0]
    assert "permission denied" in line and "roles/compute.instanceAdmin.v1" in line
    assert sum(c["call"] == "InstancesClient.insert" for c in sdk) == 1  # neither retried nor tried on the next task
    [run_json] = (tmp_path / "out").glob(f"{RUN}/*/run.json")
    assert json.loads(run_json.read_text())["status"] == "stopped"


def test_cleanup_command_filters_by_run_label(gcp_cli):
    run, sdk = gcp_cli("cleanup", "--env", "gcp", "--run-name", "Gone.Run")
    assert run.returncode == 0, run.stderr
    assert "removed 0 gcp sandbox(es) of run 'Gone.Run'" in run.stdout
    [listed] = [c for c in sdk if c["call"] == "InstancesClient.aggregated_list"]
    assert listed["args"][0]["filter"] == '(labels.agentcompass = "1") AND (labels.run = "gone-run")'
    [jobs] = [c for c in sdk if c["call"] == "BatchServiceClient.list_jobs"]  # eval's leftovers too
    assert jobs["kwargs"]["parent"] == f"projects/{fake_gcp.ADC_PROJECT}/locations/us-central1"


# -- Harbor fields: honoured where the VM can, refused before the run (one line) where it cannot ------------
def run_harbor(gcp_cli, tmp_path: Path, recipe: str, dataset: Path, *ids: str):
    conf = tmp_path / "conf"
    make_recipe(conf, recipe, dataset, runs_on_host=False)
    params = ["--benchmark-params", json.dumps({"sample_ids": list(ids)})] if ids else []
    return gcp_cli("run", recipe, "oracle", "none", "--env", "gcp", "--config-dir", str(conf), "--results-dir",
                   str(tmp_path / "res"), "--run-name", RUN, "--env-params", gcp_cli.params, *params)


def test_harbor_users_and_phase_networks_are_honoured(gcp_cli, base_image, tmp_path):
    """hello-user: the agent's commands run as `agent`, the verifier's as `checker` (docker exec -u);
    network-policy: the agent's phase has no network, the verifier's has (the container leaves and rejoins
    the VM's bridge)."""
    dataset = tmp_path / "tasks"
    schema_fixtures(dataset, base_image)
    # network-policy's check with no network as the baseline: the container must start where the verifier can
    # rejoin the bridge (a container started on `--network none` cannot).
    add_toml(make_task(dataset, "network-baseline-none", solve="true", test="true", dockerfile=f"FROM {base_image}\n"),
             '[environment]\nnetwork_mode = "no-network"\n[verifier]\nnetwork_mode = "public"\n')
    for name in ("solution/solve.sh", "tests/test.sh"):
        (dataset / "network-baseline-none" / name).write_text((dataset / "network-policy" / name).read_text())
    run, sdk = run_harbor(gcp_cli, tmp_path, "schema", dataset, "hello-user", "network-policy", "network-baseline-none")
    assert run.returncode == 0, run.stderr[-3000:]
    [trials] = (tmp_path / "res").glob(f"{RUN}/*/trials.jsonl")
    rows = {r["task_id"]: r for r in map(json.loads, trials.read_text().splitlines())}
    assert {t: r["reward"] for t, r in rows.items()} == {"hello-user": 1.0, "network-policy": 1.0,
                                                         "network-baseline-none": 1.0}, rows
    assert sum(c["call"] == "InstancesClient.insert" for c in sdk) == 3 and containers() == []


@pytest.mark.parametrize("toml_extra, field", [
    ("[environment]\ngpus = 1\n", "[environment] gpus = 1"),
    ('[agent]\nallowed_hosts = ["pypi.org"]\n', 'network_mode = "allowlist"'),
    (None, "docker-compose.yaml sidecar services (api)"),
])
def test_harbor_fields_gcp_cannot_honour_are_refused(gcp_cli, base_image, tmp_path, toml_extra, field):
    dataset = tmp_path / "tasks"
    if toml_extra is None:
        make_sidecar_task(dataset, "t", base_image)
    else:
        add_toml(make_task(dataset, "t", solve="true", test="true", dockerfile=f"FROM {base_image}\n"), toml_extra)
    run, sdk = run_harbor(gcp_cli, tmp_path, "fields", dataset)
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(lines) == 1, run.stderr
    assert field in lines[0] and "gcp provider" in lines[0], lines[0]
    assert not (tmp_path / "res").exists()
    assert not any(c["call"] == "InstancesClient.insert" for c in sdk)


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


def test_config_show_has_the_defaults(cli):
    show = cli("config", "show", "demo", "oracle", "none", "--env", "gcp")
    assert show.returncode == 0, show.stderr
    assert "machine_type: e2-medium" in show.stdout and "vm_image_family: cos-stable" in show.stdout


def test_list_envs_shows_gcp(cli):
    listed = cli("list", "envs")
    assert listed.returncode == 0 and "gcp" in listed.stdout


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


def test_cpu_and_memory_have_one_spelling_across_providers(cli):
    """gcp takes docker's and modal's canonical names, and their older spellings as aliases."""
    show = cli("config", "show", "demo", "oracle", "none", "--env", "gcp", "--env-params", '{"cpus": 2, "memory_mb": 512}')
    assert show.returncode == 0, show.stderr
    env = show.stdout[show.stdout.index("\nenv:"):]
    assert "\n  cpu: 2" in env and "\n  memory: 512" in env and "cpus:" not in env
