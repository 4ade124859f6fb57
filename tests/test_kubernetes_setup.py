"""Which credentials and namespace the kubernetes env uses, first found as for the other envs (a --config file's
api_server + token, then the kubeconfig setting, then KUBECONFIG, then ~/.kube/config, then in-cluster), and the
live access review against the fake API server (no docker needed: no pod is made)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from fake_kubernetes import FakeCluster  # noqa: E402

pytest.importorskip("kubernetes")

from agentcompass.core.errors import UserError  # noqa: E402
from agentcompass.providers.kubernetes.settings import KubernetesSettings  # noqa: E402
from agentcompass.providers.kubernetes.setup import credentials, kubernetes_readiness, namespace_of  # noqa: E402


@pytest.fixture
def cluster():
    fake = FakeCluster(namespace="team-a", denied=("create networkpolicies",)).start()
    yield fake
    fake.stop()


def test_credentials_come_first_from_config_then_setting_then_environment_then_home(tmp_path, monkeypatch):
    home, env_file, setting_file = tmp_path / "home", tmp_path / "env-kubeconfig", tmp_path / "setting-kubeconfig"
    (home / ".kube").mkdir(parents=True)
    for path in (home / ".kube" / "config", env_file, setting_file):
        path.write_text("{}")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("KUBECONFIG", str(env_file))
    token = KubernetesSettings(api_server="https://k", token="t", kubeconfig=str(setting_file))
    assert credentials(token, "environments.kubernetes in --config x").kind == "token"
    assert credentials(KubernetesSettings(kubeconfig=str(setting_file))).path == str(setting_file)
    assert credentials(KubernetesSettings()).path == str(env_file)
    monkeypatch.delenv("KUBECONFIG")
    assert credentials(KubernetesSettings()).path == str(home / ".kube" / "config")
    (home / ".kube" / "config").unlink()
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert credentials(KubernetesSettings()) is None
    with pytest.raises(UserError, match="does not exist"):
        credentials(KubernetesSettings(kubeconfig=str(tmp_path / "missing")))


def test_a_token_without_a_server_is_refused():
    with pytest.raises(ValueError, match="together"):
        KubernetesSettings(token="t")


def test_the_namespace_is_the_setting_else_the_contexts(cluster, tmp_path):
    kubeconfig = cluster.kubeconfig(tmp_path)
    found = credentials(KubernetesSettings(kubeconfig=str(kubeconfig)))
    assert namespace_of(KubernetesSettings(kubeconfig=str(kubeconfig)), found)[0] == "team-a"
    assert namespace_of(KubernetesSettings(kubeconfig=str(kubeconfig), namespace="other"), found)[0] == "other"
    data = json.loads(kubeconfig.read_text())
    data["contexts"][0]["context"].pop("namespace")
    kubeconfig.write_text(json.dumps(data))
    assert namespace_of(KubernetesSettings(kubeconfig=str(kubeconfig)), found)[0] == "default"


def test_live_check_with_a_token_names_each_refused_verb_and_never_the_token(cluster):
    settings = KubernetesSettings(api_server=cluster.url, token=cluster.token, namespace="team-a")
    report = kubernetes_readiness(settings, live=True, config_source="environments.kubernetes in --config p.yaml")
    assert report.ready  # without network_policies_enforced, networkpolicies are not needed
    enforced = settings.model_copy(update={"network_policies_enforced": True})
    report = kubernetes_readiness(enforced, live=True)
    assert not report.ready and "create networkpolicies" in report.facts[-1]
    assert cluster.token not in " ".join(report.facts + report.steps)
    wrong = KubernetesSettings(api_server=cluster.url, token="not-the-token", namespace="team-a")
    assert not kubernetes_readiness(wrong, live=True).ready
