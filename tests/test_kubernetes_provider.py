"""The kubernetes provider against a fake API server (tests/fake_kubernetes.py) that answers as the real one for the
calls the provider makes, validates each body against the client's own models and runs each pod as a docker
container of its image, with the v4.channel.k8s.io exec stream. What a real cluster adds (a CNI's enforcement,
the scheduler, the kubelet) is the live test's (tests/test_kubernetes_live.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from fake_kubernetes import FakeCluster  # noqa: E402

from agentcompass.core.errors import BackPressure, BuildFailed, FatalInfraError, SandboxLost, UserError  # noqa: E402
from agentcompass.core.sandbox import SandboxSpec  # noqa: E402

pytest.importorskip("kubernetes")
pytestmark = pytest.mark.docker


def make_provider(cluster: FakeCluster, tmp: Path, **settings):
    from agentcompass.providers.kubernetes.provider import KubernetesProvider

    base = dict(kubeconfig=str(cluster.kubeconfig(tmp)), namespace=cluster.namespace, network_policies_enforced=True,
                image="agentcompass/base:bookworm")
    return KubernetesProvider(**{**base, **settings})


def spec(name: str = "Demo__Task_One.1", *, internet: bool = True, run: str = "k8s test run", **fields) -> SandboxSpec:
    return SandboxSpec(name=name, cpus=1, memory_mb=256, allow_internet=internet, workdir="/app",
                       labels={"agentcompass": "1", "run": run, "trial": f"{name}"}, **fields)


@pytest.fixture(scope="module")
def cluster(base_image):
    fake = FakeCluster().start()
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def provider(cluster, tmp_path_factory):
    return make_provider(cluster, tmp_path_factory.mktemp("kube"))


@pytest.fixture(scope="module")
def sandbox(provider):
    box = provider.open(spec(internet=False))
    yield box
    box.close()


def test_the_pod_is_what_the_task_asks_and_no_more(cluster, sandbox):
    body = next(r["body"] for r in cluster.requests if r["method"] == "POST" and r["path"].endswith("/pods"))
    pod = body["spec"]
    assert pod["automountServiceAccountToken"] is False and pod["enableServiceLinks"] is False
    assert pod["restartPolicy"] == "Never" and pod["activeDeadlineSeconds"] > 0
    resources = pod["containers"][0]["resources"]
    assert resources["limits"] == resources["requests"] == {"cpu": "1000m", "memory": "256Mi"}
    assert body["metadata"]["labels"]["agentcompass"] == "1"
    # a name with capitals and underscores became a DNS-1123 label the strict fake took
    assert body["metadata"]["name"].startswith("demo-task-one-1")


def test_exec_exit_codes_streams_cwd_and_env(sandbox):
    result = sandbox.exec('echo out; echo err >&2; pwd; echo "$GREETING"; exit 7', env={"GREETING": "it's \"quoted\" $x"})
    assert (result.exit_code, result.stdout, result.stderr) == (7, "out\n/app\nit's \"quoted\" $x\n", "err\n")
    assert sandbox.exec("pwd", cwd="/tmp").stdout == "/tmp\n"
    assert sandbox.exec("cat", timeout=10).exit_code == 0  # stdin is empty, never the stream's


def test_a_long_command_and_a_large_output_arrive_whole(sandbox):
    long = "x='" + "a" * 240_000 + "'"  # past Linux's 128 KiB cap on one argument
    assert sandbox.exec(long + "; echo ${#x}").stdout == "240000\n"
    out = sandbox.exec("head -c 3000000 /dev/zero | tr '\\0' a").stdout
    assert len(out) == 3_000_000 and set(out) == {"a"}


def test_a_timeout_kills_the_command_and_what_it_forked(sandbox):
    result = sandbox.exec("sleep 313 & sleep 314; echo never", timeout=2)
    assert result.timed_out and result.exit_code == 124 and "never" not in result.stdout
    left = sandbox.exec("for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done").stdout
    assert "sleep 313" not in left and "sleep 314" not in left


def test_secrets_in_env_never_reach_a_url_or_a_process_list(cluster, sandbox):
    secret = "sk-k8s-test-7f3a9c"
    listing = sandbox.exec("for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done; echo ${#API_KEY}",
                           env={"API_KEY": secret})
    assert secret not in listing.stdout and listing.stdout.rstrip().endswith(str(len(secret)))
    assert not any(secret in r["path"] for r in cluster.requests)
    assert not any(secret in " ".join(argv) for argv in cluster.exec_argv)
    assert set(cluster.exec_protocols) == {"v4.channel.k8s.io"}


def test_files_round_trip_and_a_link_out_is_refused(sandbox, tmp_path):
    source = tmp_path / "src"
    (source / "sub").mkdir(parents=True)
    (source / "sub" / "a.txt").write_text("alpha")
    (source / "b.bin").write_bytes(bytes(range(256)) * 1000)
    sandbox.upload(source, "/tmp/up")
    assert sandbox.exec("cat /tmp/up/sub/a.txt").stdout == "alpha"
    sandbox.exec("ln -s /etc/passwd /tmp/up/leak")
    refused = sandbox.download("/tmp/up", tmp_path / "back")
    assert (tmp_path / "back" / "b.bin").read_bytes() == (source / "b.bin").read_bytes()
    assert (tmp_path / "back" / "sub" / "a.txt").read_text() == "alpha"
    assert refused and not (tmp_path / "back" / "leak").exists()
    with pytest.raises(FileNotFoundError):
        sandbox.download("/tmp/nothing-here", tmp_path / "none")


def test_a_no_internet_pod_has_no_network_and_an_internet_one_has(cluster, provider, sandbox):
    """The policy is made before the first such pod and selects it: the fake (like a CNI) then gives it no route."""
    paths = [r["path"] for r in cluster.requests if r["method"] == "POST"]
    assert paths.index(next(p for p in paths if p.endswith("/networkpolicies"))) < paths.index(next(p for p in paths if p.endswith("/pods")))
    policy = next(iter(cluster.policies.values()))["spec"]
    assert policy["policyTypes"] == ["Egress"] and not policy.get("egress")
    assert sandbox.exec("ls /sys/class/net").stdout.split() == ["lo"]
    online = provider.open(spec("online.1", internet=True))
    try:
        assert "eth0" in online.exec("ls /sys/class/net").stdout.split()  # the honest control
    finally:
        online.close()


def test_no_internet_is_refused_where_the_cluster_is_not_said_to_enforce_policies(cluster, tmp_path):
    with pytest.raises(UserError, match="network_policies_enforced"):
        make_provider(cluster, tmp_path, network_policies_enforced=False).check(spec(internet=False))


def test_a_policy_that_lets_pods_out_is_not_trusted(cluster, tmp_path):
    """Someone widened the shared no-egress policy: the run stops rather than run no-internet tasks online."""
    provider = make_provider(cluster, tmp_path)
    saved = dict(cluster.policies)
    name = next(iter(saved))
    cluster.policies[name] = {**saved[name], "spec": {**saved[name]["spec"], "egress": [{}]}}
    try:
        with pytest.raises(FatalInfraError, match="not the one agentcompass makes"):
            provider.open(spec("widened.1", internet=False))
    finally:
        cluster.policies.update(saved)
    assert not any(p.startswith("widened") for p in cluster.pods)


def test_a_quota_refusal_is_back_pressure_not_a_failure(base_image, tmp_path):
    fake = FakeCluster(quota_pods=1).start()
    try:
        provider = make_provider(fake, tmp_path)
        first = provider.open(spec("first.1"))
        with pytest.raises(BackPressure, match="exceeded quota"):
            provider.open(spec("second.1"))
        first.close()
        provider.open(spec("second.1")).close()  # room again: it runs
    finally:
        fake.stop()


def test_a_pod_left_pending_is_given_back_as_back_pressure(tmp_path):
    fake = FakeCluster(schedulable=False).start()
    try:
        provider = make_provider(fake, tmp_path, schedule_timeout=1)
        with pytest.raises(BackPressure, match="Insufficient cpu"):
            provider.open(spec("pending.1"))
        assert fake.pods == {}  # deleted, not left holding the quota
    finally:
        fake.stop()


def test_an_image_that_cannot_be_pulled_fails_once_per_image(cluster, tmp_path):
    provider = make_provider(cluster, tmp_path, image="agentcompass/never-built:nope")
    with pytest.raises(BuildFailed, match="ImagePullBackOff"):
        provider.open(spec("pull.1"))
    posts = sum(1 for r in cluster.requests if r["method"] == "POST" and r["path"].endswith("/pods"))
    with pytest.raises(BuildFailed, match="not pulled again"):
        provider.open(spec("pull.2"))
    assert posts == sum(1 for r in cluster.requests if r["method"] == "POST" and r["path"].endswith("/pods"))
    assert not any(p.startswith("pull") for p in cluster.pods)


def test_a_pod_that_dies_under_a_trial_is_a_lost_sandbox(cluster, provider):
    box = provider.open(spec("doomed.1"))
    try:
        subprocess.run(["docker", "rm", "-f", cluster.containers[box.id]], capture_output=True, check=True)
        with pytest.raises(SandboxLost):
            box.exec("echo still here")
    finally:
        box.close()


def test_a_task_that_needs_a_build_or_a_user_is_refused_in_one_line(cluster, tmp_path):
    provider = make_provider(cluster, tmp_path, image=None)
    with pytest.raises(UserError, match="cannot build"):
        provider.check(spec(build_context=tmp_path))
    with pytest.raises(UserError, match="commands run as the image's user"):
        provider.check(spec(image="x", users={"[agent] user": "agent"}))


def test_cleanup_deletes_the_runs_pods_only(cluster, provider):
    mine = [provider.open(spec(f"left{n}.1", run="left behind")) for n in range(2)]
    other = provider.open(spec("other.1", run="another run"))
    try:
        assert provider.cleanup("left behind") == 2
        assert set(cluster.pods) >= {other.id} and not {m.id for m in mine} & set(cluster.pods)
    finally:
        other.close()


def test_the_fake_is_as_strict_as_the_api_server(cluster):
    """What the real server refuses, the fake refuses (sent raw, past the client's own checks): the provider's
    requests pass because they are valid."""
    import urllib.error
    import urllib.request

    def post(path: str, body: dict) -> int:
        request = urllib.request.Request(cluster.url + path, data=json.dumps(body).encode(), method="POST", headers={
            "Authorization": f"Bearer {cluster.token}", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return answer.status
        except urllib.error.HTTPError as refused:
            return refused.code

    pods = f"/api/v1/namespaces/{cluster.namespace}/pods"
    bad_name = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "Not_Valid"},
                "spec": {"containers": [{"name": "c", "image": "x"}]}}
    unknown_field = {**bad_name, "metadata": {"name": "ok"}, "spec": {"containers": [{"name": "c", "image": "x", "cmd": ["x"]}]}}
    bad_label = {**bad_name, "metadata": {"name": "ok", "labels": {"run": "has space"}}}
    over_limit = {**bad_name, "metadata": {"name": "ok"}, "spec": {"containers": [{"name": "c", "image": "x", "resources": {
        "limits": {"cpu": "1"}, "requests": {"cpu": "2"}}}]}}
    for body in (bad_name, unknown_field, bad_label, over_limit):
        assert post(pods, body) == 422, json.dumps(body)
    assert post("/api/v1/namespaces/kube-system/pods", {**bad_name, "metadata": {"name": "ok"}}) == 404


def test_compose_sidecars_are_containers_of_the_pod_reached_by_their_names(provider, cluster):
    from agentcompass.core.sandbox import ComposeSpec, ContainerSpec

    server = ContainerSpec(name="api", image="agentcompass/base:bookworm",
                           command=["python3", "-m", "http.server", "8087", "--directory", "/etc"])
    compose = ComposeSpec(client=ContainerSpec(name="main"), services=[server], required=True)
    provider.check(spec("sidecar.1", compose=compose))
    box = provider.open(spec("sidecar.1", internet=False, compose=compose))
    try:
        fetch = box.exec("for i in $(seq 50); do python3 -c 'import urllib.request as u; "
                         "print(u.urlopen(\"http://api:8087/hostname\").status)' 2>/dev/null && break; sleep 0.2; done")
        assert fetch.stdout.strip() == "200"
        body = next(r["body"] for r in cluster.requests if r["method"] == "POST" and r["path"].endswith("/pods")
                    and r["body"]["metadata"]["name"].startswith("sidecar"))
        assert [c["name"] for c in body["spec"]["containers"]] == ["trial", "api"]
    finally:
        box.close()
    built = ComposeSpec(client=ContainerSpec(name="main"), services=[ContainerSpec(name="db", build_context=Path("."))],
                        required=True)
    with pytest.raises(UserError, match="cannot build|built from a Dockerfile"):
        provider.check(spec("sidecar.2", compose=built))


def test_a_cluster_that_speaks_v5_runs_the_same_commands(tmp_path):
    """Newer API servers choose v5.channel.k8s.io when the client offers it: same framing, stdin never closed by us."""
    fake = FakeCluster(protocols=("v5.channel.k8s.io", "v4.channel.k8s.io")).start()
    try:
        box = make_provider(fake, tmp_path).open(spec("five.1"))
        try:
            (tmp_path / "f").write_text("v5 payload")
            box.upload(tmp_path / "f", "/tmp/five/f")
            result = box.exec("cat /tmp/five/f; exit 4")
            assert (result.exit_code, result.stdout) == (4, "v5 payload")
            assert set(fake.exec_protocols) == {"v5.channel.k8s.io"}
        finally:
            box.close()
    finally:
        fake.stop()
