"""`agentcompass run/env check/cleanup --env kubernetes` as a user types them, against the fake API server
(tests/fake_kubernetes.py): the demo passes end to end with the oracle and fails with an agent that does
nothing; a no-internet task is refused in one line where policies are not said to be enforced; env check names
the credentials, the namespace (the kubeconfig context's) and each RBAC verb the cluster refuses."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from conftest import run_cli  # noqa: E402
from fake_kubernetes import FakeCluster  # noqa: E402

pytest.importorskip("kubernetes")
pytestmark = pytest.mark.docker
TWO_TASKS = json.dumps({"sample_ids": ["csv-sales-report", "fix-median-bug"]})


def private_config(cluster: FakeCluster, tmp: Path, **settings) -> Path:
    path = tmp / "private.yaml"
    block = {"kubeconfig": str(cluster.kubeconfig(tmp)), "network_policies_enforced": True,
             "image": "agentcompass/base:bookworm", **settings}
    path.write_text(json.dumps({"environments": {"kubernetes": block}}), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def cluster(base_image):
    fake = FakeCluster(denied=("delete pods",)).start()
    yield fake
    fake.stop()


def test_the_demo_runs_end_to_end_on_a_cluster(cluster, tmp_path):
    config = private_config(cluster, tmp_path)
    done = run_cli("run", "demo", "oracle", "none", "--env", "kubernetes", "--config", str(config),
                   "--results-dir", str(tmp_path / "results"), timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "passed 6  failed 0  errors 0" in done.stdout
    created = [r for r in cluster.requests if r["method"] == "POST" and r["path"].endswith("/pods")]
    assert len(created) == 6 and all(r["path"].startswith(f"/api/v1/namespaces/{cluster.namespace}/") for r in created)
    assert cluster.pods == {}  # every pod deleted at its trial's end


def test_an_agent_that_does_nothing_fails_on_a_cluster_too(cluster, tmp_path):
    config = private_config(cluster, tmp_path)
    done = run_cli("run", "demo", "nop", "none", "--env", "kubernetes", "--config", str(config),
                   "--benchmark-params", TWO_TASKS, "--results-dir", str(tmp_path / "results"), timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "passed 0  failed 2" in done.stdout


def test_no_internet_tasks_are_refused_unless_policies_are_enforced(cluster, tmp_path):
    config = private_config(cluster, tmp_path, network_policies_enforced=False)
    done = run_cli("run", "demo", "oracle", "none", "--env", "kubernetes", "--config", str(config),
                   "--results-dir", str(tmp_path / "results"))
    assert done.returncode == 2 and "network_policies_enforced" in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "results").exists()


def test_env_check_names_the_credentials_namespace_and_refused_verbs(cluster, tmp_path):
    config = private_config(cluster, tmp_path)
    done = run_cli("env", "check", "kubernetes", "--config", str(config))
    assert done.returncode != 0
    assert f"namespace: {cluster.namespace} (from context fake of the kubeconfig)" in done.stdout
    assert "not allowed" in done.stdout and "delete pods" in done.stdout and "create pods/exec" not in done.stdout
    assert cluster.token not in done.stdout + done.stderr


def test_env_check_without_credentials_says_how_to_get_them(tmp_path):
    done = run_cli("env", "check", "kubernetes", env={"HOME": str(tmp_path), "KUBECONFIG": ""})
    assert done.returncode != 0 and "credentials: none found" in done.stdout and "KUBECONFIG" in done.stdout


def test_cleanup_removes_what_a_killed_run_left(cluster, tmp_path):
    from agentcompass.core.sandbox import SandboxSpec
    from agentcompass.providers.kubernetes.provider import KubernetesProvider

    provider = KubernetesProvider(kubeconfig=str(cluster.kubeconfig(tmp_path)), image="agentcompass/base:bookworm")
    left = provider.open(SandboxSpec(name="killed.1", labels={"agentcompass": "1", "run": "killed", "trial": "t.1"}))
    config = private_config(cluster, tmp_path)
    done = run_cli("cleanup", "--env", "kubernetes", "--run-name", "killed", "--config", str(config))
    assert done.returncode == 0 and "removed 1" in done.stdout, done.stderr
    assert left.id not in cluster.pods


def test_an_agent_in_a_no_internet_pod_reaches_the_model_only_through_the_gateway(cluster, tmp_path):
    """The gateway at run.gateway.public_url, the one address the pod's policy allows (gateway_egress_cidr): the
    agent's calls arrive with the trial's own token, never the model's key, and the task is solved."""
    import socket

    from fake_llm_server import FakeLLM, FakeLLMServer
    from mini_demo import API_KEY, FIX_COMMANDS, ONLY_TASK, isolated_env, read_trials, run_dir

    address = cluster.egress_gateway()
    with socket.socket() as probe:
        probe.bind((address, 0))
        port = probe.getsockname()[1]
    config = private_config(cluster, tmp_path, gateway_egress_cidr=f"{address}/32")
    llm = FakeLLM(FIX_COMMANDS)
    with FakeLLMServer(llm) as server:
        done = run_cli("run", "demo", "mini_swe_agent", "openai_compatible", "model.name=fake-coder-1",
                       "--model-base-url", server.base_url, "--model-api-key", API_KEY, "--benchmark-params", ONLY_TASK,
                       "--env", "kubernetes", "--config", str(config), f"run.gateway.public_url=http://{address}:{port}",
                       f"run.gateway.port={port}", "--results-dir", str(tmp_path / "results"), cwd=tmp_path,
                       env=isolated_env(tmp_path), timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    [trial] = read_trials(run_dir(tmp_path / "results"))
    assert trial["status"] == "passed", trial
    assert llm.successes and all(r.authorization == f"Bearer {API_KEY}" for r in llm.successes)  # the gateway added the key
    policies = [p for p in cluster.policies if p.endswith(tuple("0123456789abcdef"))]
    assert policies, cluster.policies  # its own policy, apart from the plain no-egress one
