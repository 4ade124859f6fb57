"""`agentcompass run|cleanup|config show --env gcp` in a subprocess, the fake Compute client installed in it
(tests/gcp_vms.py: gcp_cli): a whole run over SSH, Ctrl-C, one-line refusals with exit 2, Harbor fields
honoured or refused, and the settings as `config show` prints them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import fake_gcp
from gcp_vms import RUN, containers, gcp_cli, sshd, top  # noqa: F401  (fixtures)
from gcp_vms import fake as fake  # noqa: F401,PLC0414  (fixture)
from harbor_factory import add_toml, make_recipe, make_sidecar_task, make_task, schema_fixtures


# -- the CLI, with the fake client in the subprocess -------------------------------------------------
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
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and not (log.exists() and log.read_text().count('"InstancesClient.get"') >= 3):
        time.sleep(0.2)  # three VMs inserted, each booting for five minutes
    time.sleep(1)
    proc.send_signal(signal.SIGINT)
    started = time.monotonic()
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert time.monotonic() - started < 60  # within seconds (a busy machine's), not the boots' 300 s
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


def test_config_show_has_the_defaults(cli):
    show = cli("config", "show", "demo", "oracle", "none", "--env", "gcp")
    assert show.returncode == 0, show.stderr
    assert "machine_type: e2-medium" in show.stdout and "vm_image_family: cos-stable" in show.stdout


def test_list_envs_shows_gcp(cli):
    listed = cli("list", "envs")
    assert listed.returncode == 0 and "gcp" in listed.stdout



def test_cpu_and_memory_have_one_spelling_across_providers(cli):
    """gcp takes docker's and modal's canonical names, and their older spellings as aliases."""
    show = cli("config", "show", "demo", "oracle", "none", "--env", "gcp", "--env-params", '{"cpus": 2, "memory_mb": 512}')
    assert show.returncode == 0, show.stderr
    env = show.stdout[show.stdout.index("\nenv:"):]
    assert "\n  cpu: 2" in env and "\n  memory: 512" in env and "cpus:" not in env
