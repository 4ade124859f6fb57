"""The opt-in live check against YOUR cluster (never run by CI here; a skip is not a pass).

    AGENTCOMPASS_KUBERNETES_LIVE=1 [KUBECONFIG=...] [AGENTCOMPASS_KUBERNETES_NAMESPACE=ns]
    [AGENTCOMPASS_KUBERNETES_IMAGE=python:3.11-slim-bookworm] [AGENTCOMPASS_KUBERNETES_ENFORCED=1]
    python -m pytest -n 0 tests/test_kubernetes_live.py

It checks what the fake cannot: the real API server's access reviews, the scheduler and kubelet starting a pod,
the real exec stream, and (with AGENTCOMPASS_KUBERNETES_ENFORCED=1, for a cluster whose network plugin enforces
NetworkPolicies) that a no-internet pod really reaches nothing while an internet one does.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from agentcompass.core.sandbox import SandboxSpec

pytest.importorskip("kubernetes")
LIVE = os.environ.get("AGENTCOMPASS_KUBERNETES_LIVE") == "1"
KUBECONFIG = os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
pytestmark = pytest.mark.skipif(not (LIVE and Path(KUBECONFIG.split(os.pathsep)[0]).is_file()),
                                reason="live Kubernetes check NOT RUN (not a pass): opt in with "
                                       "AGENTCOMPASS_KUBERNETES_LIVE=1 and a kubeconfig")
ENFORCED = os.environ.get("AGENTCOMPASS_KUBERNETES_ENFORCED") == "1"
PROBE = ("python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 443), timeout=5); print(\"reached\")' "
         "2>/dev/null || echo blocked")


def settings() -> dict:
    return {"namespace": os.environ.get("AGENTCOMPASS_KUBERNETES_NAMESPACE") or None,
            "image": os.environ.get("AGENTCOMPASS_KUBERNETES_IMAGE", "python:3.11-slim-bookworm"),
            "network_policies_enforced": ENFORCED}


def trial(internet: bool) -> SandboxSpec:
    run = f"live-{uuid.uuid4().hex[:6]}"
    return SandboxSpec(name=f"{run}.{'online' if internet else 'offline'}", workdir="/app", cpus=0.5, memory_mb=256,
                       allow_internet=internet, labels={"agentcompass": "1", "run": run, "trial": "live.1"})


def test_live_env_check_grants_every_verb_a_run_needs():
    from agentcompass.providers.kubernetes.provider import KubernetesProvider

    report = KubernetesProvider.readiness(settings(), live=True)
    assert report.ready, report.facts


def test_live_pod_runs_commands_and_moves_files(tmp_path):
    from agentcompass.providers.kubernetes.provider import KubernetesProvider

    provider = KubernetesProvider(**settings())
    box = provider.open(trial(internet=True))
    try:
        result = box.exec("echo out; echo err >&2; pwd; exit 3", env={"K": "v w"})
        assert (result.exit_code, result.stdout, result.stderr) == (3, "out\n/app\n", "err\n")
        (tmp_path / "f").write_text("payload")
        box.upload(tmp_path / "f", "/tmp/live/f")
        box.download("/tmp/live", tmp_path / "back")
        assert (tmp_path / "back" / "f").read_text() == "payload"
        assert box.exec("sleep 60", timeout=2).timed_out
    finally:
        box.close()


@pytest.mark.skipif(not ENFORCED, reason="NOT RUN (not a pass): set AGENTCOMPASS_KUBERNETES_ENFORCED=1 on a cluster that enforces NetworkPolicies")
def test_live_no_internet_pod_reaches_nothing_and_an_internet_one_does():
    from agentcompass.providers.kubernetes.provider import KubernetesProvider

    provider = KubernetesProvider(**settings())
    for internet, expected in ((False, "blocked"), (True, "reached")):
        box = provider.open(trial(internet))
        try:
            assert box.exec(PROBE).stdout.strip() == expected
        finally:
            box.close()
