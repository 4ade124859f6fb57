"""`--env podman` on a real podman (4.3, Debian's), rootful: the docker provider's end-to-end behaviour through
podman's compatible API. The demo passes; a trial that may reach the internet reaches this host but never
another trial (podman has no docker's ICC switch: each trial gets an isolated network of its own); a no-network
trial has no way out; the verifier's integrity checks catch the same attacks as on docker (they read podman's
`overlay` storage, or its changes API) while honest work passes; a task's heredoc Dockerfile builds with
buildah; `cleanup` and `env check podman` work. tests/test_podman_rootless.py runs the demo rootless."""

from __future__ import annotations

import http.server
import json
import threading

import pytest

from agentcompass.core.errors import UserError
from agentcompass.core.sandbox import ComposeSpec, ContainerSpec, SandboxSpec
from docker_sandbox import open_sandbox, plain_context, unique  # noqa: F401 (fixtures, opening on `provider` here)
from harbor_factory import HONEST_CONTROLS, make_recipe
from podman_service import Service, podman_rootful  # noqa: F401 (a fixture)
from test_verifier_integrity import ATTACKS, integrity_dataset, oracle_rows

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def provider(podman_rootful: Service):
    from agentcompass.providers.podman.provider import PodmanProvider

    yield PodmanProvider(host=podman_rootful.url)


def test_the_demo_passes_and_leaves_nothing(cli, podman_rootful: Service, base_image, tmp_path):
    done = cli("run", "demo", "oracle", "none", "--env", "podman", "--env-params", json.dumps({"host": podman_rootful.url}),
               "--results-dir", str(tmp_path), "--run-name", "podman-demo", env={"AGENTCOMPASS_BASE_IMAGE": base_image},
               timeout=900)
    assert done.returncode == 0, done.stderr
    assert "passed 6  failed 0  errors 0" in done.stdout, done.stdout
    assert podman_rootful.ids("run=podman-demo") == []
    assert podman_rootful.ids("run=podman-demo", kind="network") == []


class HostServer:
    """An HTTP server on every address of this host: what a trial with internet may reach (as the model gateway)."""

    def __enter__(self) -> int:
        self.server = http.server.ThreadingHTTPServer(("0.0.0.0", 0), http.server.SimpleHTTPRequestHandler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self.server.server_address[1]

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()


def connect(box, address: str, port: int) -> str:
    """`open`, `refused` (reachable, nothing listens) or `unreachable` (dropped, or no route)."""
    probe = (f"timeout 3 bash -c 'exec 3<>/dev/tcp/{address}/{port}' 2>/tmp/e && echo open || "
             "{ grep -q refused /tmp/e && echo refused || echo unreachable; }")
    return box.exec(probe, timeout=30).stdout.strip()


def test_a_trial_with_internet_reaches_this_host_and_never_another_trial(open_sandbox, podman_rootful: Service):
    first, second = open_sandbox(allow_internet=True), open_sandbox(allow_internet=True)
    networks = [list(podman_rootful.inspect(box.id)["NetworkSettings"]["Networks"]) for box in (first, second)]
    assert networks[0] != networks[1] and len(networks[0]) == 1  # a network of each trial's own
    info = podman_rootful.inspect(second.id)["NetworkSettings"]["Networks"][networks[1][0]]
    with HostServer() as port:
        gateway = podman_rootful.inspect(first.id)["NetworkSettings"]["Networks"][networks[0][0]]["Gateway"]
        assert connect(first, gateway, port) == "open"  # the honest control: this host (the model gateway's)
    # The attack: the other trial's server (on one shared bridge, as docker's run network without its ICC switch,
    # this would be "open")
    second.exec("nohup python3 -m http.server 8000 >/dev/null 2>&1 & "
                "for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/8000) 2>/dev/null && break; sleep 0.1; done",
                timeout=30)
    assert connect(second, "127.0.0.1", 8000) == "open"
    assert connect(first, info["IPAddress"], 8000) == "unreachable"
    name = networks[0][0]
    first.close()
    assert podman_rootful.ids(f"trial={name}", kind="network") == []
    assert subprocess_network_gone(podman_rootful, name)


def subprocess_network_gone(service: Service, name: str) -> bool:
    import subprocess

    return subprocess.run([*service.podman, "network", "exists", name]).returncode != 0


def test_a_trial_without_internet_has_no_way_out(open_sandbox, podman_rootful: Service):
    box = open_sandbox(allow_internet=False)
    assert not podman_rootful.inspect(box.id)["NetworkSettings"].get("Networks")
    assert box.exec("ls /sys/class/net", timeout=30).stdout.split() == ["lo"]
    assert connect(box, "1.1.1.1", 80) == "unreachable"


EXPECTED_CHANGES = {("A", "/app/new.txt"), ("C", "/etc/motd"), ("D", "/etc/issue"), ("A", "/opt/private/deep.txt")}


@pytest.mark.parametrize("through", ["storage", "api"])
def test_changes_list_what_the_container_added_changed_and_deleted(open_sandbox, through):
    from agentcompass.providers.docker.changes import storage_dirs

    box = open_sandbox()
    if through == "api":
        box.overlay_driver = None  # as a client that is not root reads them: podman's changes API
    else:  # root reads podman's `overlay` upper dir itself
        assert storage_dirs(box.api.inspect_container(box.id), box.overlay_driver) is not None
    box.exec("echo x > /app/new.txt; echo y >> /etc/motd; rm /etc/issue; mkdir -p /opt/private; "
             "echo z > /opt/private/deep.txt; chown -R nobody /opt/private; chmod 700 /opt/private", timeout=30)
    assert EXPECTED_CHANGES <= set(box.changes())


def test_a_heredoc_dockerfile_builds_with_buildah(open_sandbox, tmp_path, base_image):
    context = tmp_path / "heredoc" / "environment"
    context.mkdir(parents=True)
    (context / "Dockerfile").write_text(f"# syntax=docker/dockerfile:1.4\nFROM {base_image}\n"
                                        "RUN <<EOF\necho made-by-a-heredoc > /made.txt\nEOF\n")
    box = open_sandbox(build_context=context)
    assert box.exec("cat /made.txt", timeout=30).stdout.strip() == "made-by-a-heredoc"


def test_attacks_on_the_verifier_fail_and_honest_work_passes(cli, podman_rootful: Service, base_image, tmp_path,
                                                            monkeypatch):
    monkeypatch.setenv("CONTAINER_HOST", podman_rootful.url)
    dataset, conf = tmp_path / "tasks", tmp_path / "conf"
    integrity_dataset(dataset, base_image)
    make_recipe(conf, "integrity", dataset, runs_on_host=False)
    rows = oracle_rows(cli, "integrity", "podman", conf, tmp_path)
    seen = {t: (r["status"], r["reward"], r["message"][:200], r["details"].get("tampered")) for t, r in rows.items()}
    for task_id in ATTACKS:
        assert rows[task_id]["status"] == "failed", (task_id, seen)
    for task_id in ("replaced-python3", "sitecustomize", "usercustomize", "pth-import-hook"):
        assert rows[task_id]["details"].get("tampered"), (task_id, seen)
    for task_id in HONEST_CONTROLS:
        if task_id in rows:
            assert rows[task_id]["status"] == "passed" and rows[task_id]["reward"] == 1.0, (task_id, seen)


def test_cleanup_removes_what_a_killed_run_left(cli, provider, plain_context, podman_rootful: Service, tmp_path):
    run = unique("podman-killed")
    box = provider.open(SandboxSpec(name=unique("ac-podman"), labels={"agentcompass": "1", "run": run},
                                    build_context=plain_context, log_dir=tmp_path, allow_internet=True))
    network = box.trial_network
    assert network and podman_rootful.ids(f"run={run}")  # a SIGKILL leaves both
    done = cli("cleanup", "--env", "podman", "--run-name", run, "--env-params", json.dumps({"host": podman_rootful.url}))
    assert done.returncode == 0, done.stderr
    assert "removed 1 podman sandbox(es)" in done.stdout
    assert podman_rootful.ids(f"run={run}") == [] and subprocess_network_gone(podman_rootful, network)


def test_env_check_names_the_engine_and_a_missing_socket_in_one_line(cli, podman_rootful: Service, tmp_path):
    done = cli("env", "check", "podman", env={"CONTAINER_HOST": podman_rootful.url})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "podman 4" in done.stdout and "rootful" in done.stdout
    missing = cli("env", "check", "podman", env={"CONTAINER_HOST": f"unix://{tmp_path}/none.sock"})
    assert missing.returncode != 0
    assert f"no podman API socket at {tmp_path}/none.sock" in missing.stdout + missing.stderr
    assert "Traceback" not in missing.stderr


def test_sidecars_and_allowlists_are_refused_before_the_run_in_one_line(provider, plain_context):
    compose = ComposeSpec(client=ContainerSpec(name="main"), services=[ContainerSpec(name="db", image="x")],
                          required=True)
    for spec in (SandboxSpec(name="t", build_context=plain_context, compose=compose),
                 SandboxSpec(name="t", build_context=plain_context, network_modes=("allowlist",))):
        with pytest.raises(UserError, match="podman"):
            provider.check(spec)


def test_harbors_healthcheck_task_passes_with_the_oracle_and_fails_with_nop(cli, podman_rootful: Service, tmp_path):
    """The image's ENTRYPOINT starts the server the healthcheck and the tests want, as on docker (podman's `top`
    tells the keep-alive apart as docker's does)."""
    from test_docker_entrypoint import EXAMPLES

    conf = tmp_path / "conf"
    make_recipe(conf, "examples", EXAMPLES, runs_on_host=False)
    done = cli("validate", "examples", "--env", "podman", "--config-dir", str(conf), "--results-dir", str(tmp_path / "res"),
               env={"CONTAINER_HOST": podman_rootful.url})
    assert done.returncode == 0, done.stdout + done.stderr
    [row] = [line.split() for line in done.stdout.splitlines() if line.startswith("hello-healthcheck")]
    assert row[1:] == ["passed", "failed", "ok"], done.stdout


def test_the_docker_hardening_holds_on_podman(open_sandbox, base_image, tmp_path):
    """No new privileges, NET_RAW and MKNOD dropped, the process limit: podman applies docker's options alike."""
    box = open_sandbox()
    status = box.exec("grep -E '^(NoNewPrivs|CapEff)' /proc/self/status", timeout=30).stdout
    assert "NoNewPrivs:\t1" in status, status
    effective = int(status.split("CapEff:")[1].split()[0], 16)
    assert not effective & (1 << 13) and not effective & (1 << 27)  # CAP_NET_RAW, CAP_MKNOD
    assert effective & (1 << 0)  # CAP_CHOWN stays: apt and pip need it
    limit = box.exec("cat /sys/fs/cgroup/pids/pids.max /sys/fs/cgroup/pids.max 2>/dev/null", timeout=30).stdout.split()
    assert limit == ["4096"], limit
    assert box.exec("mknod /tmp/dev c 1 3", timeout=30).exit_code != 0


def test_a_missing_image_is_left_to_the_trials_pull_as_podman_has_no_registry_probe(provider, tmp_path):
    """podman 4 answers docker's registry probe with "not supported": that is no verdict on the image, so the run
    is not refused before it starts; the trial's pull says what is wrong (here: no registry is reachable)."""
    from agentcompass.core.errors import InfraError

    spec = SandboxSpec(name=unique("ac-podman"), image="example.invalid/agentcompass/absent:1", log_dir=tmp_path,
                       labels={"agentcompass": "1", "run": "pytest-podman-pull"})
    provider.check(spec)
    with pytest.raises(InfraError, match="cannot pull image 'example.invalid/agentcompass/absent:1'"):
        provider.open(spec)
