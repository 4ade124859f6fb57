"""`--env podman` rootless: podman's API service run by an unprivileged user (subordinate ids, its own user
namespace and storage). The demo passes through it; `env check podman` says it is rootless and, on a cgroup v1
host (this CI's), that podman sets no limits there, which a run says once and `limits: required` refuses."""

from __future__ import annotations

import json

import pytest

from docker_sandbox import plain_context  # noqa: F401 (a fixture)
from podman_service import Service, podman_rootless  # noqa: F401 (a fixture)

pytestmark = pytest.mark.docker


def cgroup_v1(service: Service, cli) -> bool:
    return "cgroup v1" in cli("env", "check", "podman", env={"CONTAINER_HOST": service.url}).stdout


def test_the_demo_passes_rootless(cli, podman_rootless: Service, base_image, tmp_path):
    params = json.dumps({"host": podman_rootless.url})
    done = cli("run", "demo", "oracle", "none", "--env", "podman", "--env-params", params, "--benchmark-params",
               json.dumps({"sample_ids": ["fix-median-bug", "git-revert-bad-commit"]}), "--results-dir", str(tmp_path),
               "--run-name", "podman-rootless", env={"AGENTCOMPASS_BASE_IMAGE": base_image}, timeout=900)
    assert done.returncode == 0, done.stderr
    assert "passed 2  failed 0  errors 0" in done.stdout, done.stdout
    trial = json.loads((tmp_path / "podman-rootless" / "demo__oracle__none__podman" / "trials.jsonl")
                       .read_text().splitlines()[0])
    assert not trial["details"].get("tampered")
    assert podman_rootless.ids("run=podman-rootless") == []
    if cgroup_v1(podman_rootless, cli):
        assert "rootless podman on cgroup v1 has no memory, cpu, pids controller" in done.stderr


def test_env_check_says_rootless_and_required_limits_refuse_where_none_are_set(cli, podman_rootless: Service,
                                                                              tmp_path):
    done = cli("env", "check", "podman", env={"CONTAINER_HOST": podman_rootless.url})
    assert done.returncode == 0 and "rootless" in done.stdout, done.stdout + done.stderr
    if not cgroup_v1(podman_rootless, cli):
        pytest.skip("a cgroup v2 host: rootless podman sets the limits")
    refused = cli("run", "demo", "oracle", "none", "--env", "podman", "--env-params",
                  json.dumps({"host": podman_rootless.url, "limits": "required"}), "--results-dir", str(tmp_path),
                  "--run-name", "podman-refused")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "cpu, memory and process limits" in refused.stderr and "Traceback" not in refused.stderr
    assert not (tmp_path / "podman-refused").exists()


def test_rootless_trials_never_reach_each_other_and_a_no_network_one_has_only_lo(podman_rootless: Service,
                                                                                 plain_context, tmp_path):
    from agentcompass.core.sandbox import SandboxSpec
    from agentcompass.providers.podman.provider import PodmanProvider
    from docker_sandbox import unique
    from test_podman import connect

    provider = PodmanProvider(host=podman_rootless.url)
    labels = {"agentcompass": "1", "run": unique("podman-rootless")}
    opened = [provider.open(SandboxSpec(name=unique("ac-podman"), build_context=plain_context, labels=labels,
                                        log_dir=tmp_path, allow_internet=internet)) for internet in (True, True, False)]
    try:
        first, second, offline = opened
        second.exec("nohup python3 -m http.server 8000 >/dev/null 2>&1 & "
                    "for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/8000) 2>/dev/null && break; sleep 0.1; done",
                    timeout=30)
        assert connect(second, "127.0.0.1", 8000) == "open"
        address = podman_rootless.inspect(second.id)["NetworkSettings"]["Networks"][second.trial_network]["IPAddress"]
        assert connect(first, address, 8000) == "unreachable"
        assert offline.exec("ls /sys/class/net", timeout=30).stdout.split() == ["lo"]
        assert ("A", "/app/x") in (offline.exec("touch /app/x", timeout=30) and offline.changes())
    finally:
        for box in opened:
            box.close()
    assert podman_rootless.ids(f"run={labels['run']}") == []
    assert podman_rootless.ids(f"run={labels['run']}", kind="network") == []
