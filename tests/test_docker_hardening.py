"""A hostile agent in a docker trial: what it tries must fail (raw sockets, device nodes, a fork bomb, a setuid
binary, another trial's or the user's containers), and what honest tasks do must still work (the host's
services on the run's network, root dropping to a task user)."""

from __future__ import annotations

import http.server
import subprocess
import threading
import time

import pytest

from agentcompass.providers.docker.provider import DockerProvider

from docker_sandbox import inspect, open_sandbox, plain_context, provider, unique  # noqa: F401 (fixtures)
from gateway_fixtures import upstream  # noqa: F401 (fixture)

pytestmark = pytest.mark.docker

CONNECTS = "python3 -c 'import socket,sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3); print(\"reached\")'"


def ip_on(container: str, network: str | None = None) -> str:
    networks = inspect(container)["NetworkSettings"]["Networks"]
    return networks[network or next(iter(networks))]["IPAddress"]


def serve_in(box, port: int = 8000) -> None:
    """A web server left running in the sandbox (as a task's agent leaves one for its tests)."""
    box.exec(f"nohup python3 -m http.server {port} >/dev/null 2>&1 & "
             f"for i in $(seq 50); do {CONNECTS} 127.0.0.1 {port} 2>/dev/null && break; sleep 0.1; done", timeout=30)


def test_raw_sockets_and_device_nodes_are_refused_even_to_root(open_sandbox):
    box = open_sandbox()
    raw = box.exec("python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)'")
    assert raw.exit_code != 0 and "PermissionError" in raw.stderr, raw
    node = box.exec("mknod /tmp/mem c 1 1")
    assert node.exit_code != 0 and "Operation not permitted" in node.stderr, node
    # what honest installs need stays: ownership, modes, and root becoming a task's user
    honest = box.exec("useradd -m task && touch /tmp/f && chown task /tmp/f && chmod 4755 /tmp/f && "
                      "su task -c 'id -un' && runuser -u task -- id -u")
    assert honest.ok and honest.stdout.split()[0] == "task", honest


def test_a_setuid_binary_gives_an_unprivileged_agent_nothing(open_sandbox):
    box = open_sandbox()
    assert box.exec("cp /usr/bin/id /usr/local/bin/suid-id && chmod 4755 /usr/local/bin/suid-id").ok
    # without no-new-privileges the effective uid of this binary would be 0 (root)
    assert box.exec("/usr/local/bin/suid-id -u", user="nobody").stdout.strip() == "65534"


def test_a_fork_bomb_stops_at_the_process_limit_and_spares_the_other_trials(base_image, plain_context, tmp_path):
    from agentcompass.core.sandbox import SandboxSpec

    small = DockerProvider(pids_limit=64)
    labels = {"agentcompass": "1", "run": unique("pytest-bomb")}
    bomb = small.open(SandboxSpec(name=unique("ac-bomb"), build_context=plain_context, labels=labels, log_dir=tmp_path))
    other = DockerProvider().open(SandboxSpec(name=unique("ac-calm"), build_context=plain_context, labels=labels,
                                              log_dir=tmp_path))
    try:
        assert inspect(bomb.spec.name)["HostConfig"]["PidsLimit"] == 64
        bomb.exec("nohup bash -c ':(){ :|:& };:' >/dev/null 2>&1 &", timeout=30)
        counts = []
        for _ in range(40):
            stats = subprocess.run(["docker", "stats", "--no-stream", "--format", "{{.PIDs}}", bomb.spec.name],
                                   capture_output=True, text=True)
            counts.append(int(stats.stdout.strip() or 0))
            if counts[-1] >= 60:
                break
            time.sleep(0.25)
        assert 60 <= max(counts) <= 64, counts  # it ran into the limit, and no further
        assert other.exec("echo calm", timeout=60).stdout == "calm\n"  # another trial is unharmed
    finally:
        bomb.close()  # removed by force, bomb and all
        other.close()
        small.end_run(labels["run"])
    assert subprocess.run(["docker", "inspect", bomb.spec.name], capture_output=True).returncode != 0


def test_the_default_process_limit_is_set(open_sandbox):
    box = open_sandbox()
    assert inspect(box.spec.name)["HostConfig"]["PidsLimit"] == 4096


@pytest.fixture
def user_container(base_image):
    """A container of the user's on the engine's default bridge, serving on port 8000."""
    name = unique("ac-user")
    subprocess.run(["docker", "run", "-d", "--name", name, "--label", "agentcompass-test=1", base_image,
                    "python3", "-m", "http.server", "8000"], check=True, capture_output=True)
    try:
        yield name
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)


def reachable_from_host(address: str, port: int = 8000) -> bool:
    import socket

    for _ in range(50):
        try:
            socket.create_connection((address, port), timeout=1).close()
            return True
        except OSError:
            time.sleep(0.1)
    return False


def test_a_trial_reaches_neither_another_trial_nor_the_users_containers(open_sandbox, user_container):
    a, b = open_sandbox(), open_sandbox()  # two trials of one run, both allowed the internet
    serve_in(b)
    b_address, user_address = ip_on(b.spec.name), ip_on(user_container, "bridge")
    # both servers answer (from this host), so what the trial cannot reach is there to be reached
    assert reachable_from_host(b_address) and reachable_from_host(user_address)
    for address in (b_address, user_address):
        probe = a.exec(f"{CONNECTS} {address} 8000", timeout=30)
        assert probe.exit_code != 0 and "reached" not in probe.stdout, (address, probe)
    network = inspect(a.spec.name)["HostConfig"]["NetworkMode"]
    assert network == inspect(b.spec.name)["HostConfig"]["NetworkMode"] != "bridge"


def test_the_host_is_reached_at_host_address_and_the_network_goes_with_the_run(base_image, plain_context, tmp_path):
    """The model gateway's case: a service on this host at host_address() answers a trial; end_run removes the
    run's network, and `cleanup` removes one a killed run left."""
    from agentcompass.core.sandbox import SandboxSpec

    own = DockerProvider()
    run = unique("pytest-hostaddr")
    address = own.host_address(run)
    server = http.server.ThreadingHTTPServer((address, 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    box = own.open(SandboxSpec(name=unique("ac-test"), build_context=plain_context, log_dir=tmp_path,
                               labels={"agentcompass": "1", "run": run}))
    try:
        probe = box.exec(f"{CONNECTS} {address} {server.server_address[1]}", timeout=30)
        assert probe.stdout.strip() == "reached", probe
        network = inspect(box.spec.name)["HostConfig"]["NetworkMode"]
        options = subprocess.run(["docker", "network", "inspect", "-f", "{{json .Options}} {{.Labels.run}}", network],
                                 capture_output=True, text=True, check=True).stdout
        assert '"com.docker.network.bridge.enable_icc":"false"' in options and run in options
    finally:
        box.close()
        server.shutdown()
    own.end_run(run)
    assert subprocess.run(["docker", "network", "inspect", network], capture_output=True).returncode != 0
    DockerProvider().host_address(run)  # a killed run's network, left behind
    assert DockerProvider().cleanup(run) == 0
    assert not subprocess.run(["docker", "network", "ls", "-q", "--filter", f"label=run={run}"],
                              capture_output=True, text=True).stdout.strip()


def test_trials_without_internet_do_not_reach_each_other_on_the_gateways_network(open_sandbox, upstream, tmp_path):
    """Offline trials of a harness that calls a model join the gateway's internal network (this host only):
    they reach the gateway, never each other."""
    from gateway_fixtures import GLM, new_trial, start_gateway

    gateway = start_gateway(GLM, upstream.url, host="0.0.0.0")
    a, b = open_sandbox(allow_internet=False), open_sandbox(allow_internet=False)
    try:
        host = gateway.endpoint(new_trial(tmp_path, "a"), a).openai_base_url.split("//")[1].split(":")[0]
        gateway.endpoint(new_trial(tmp_path, "b"), b)
        serve_in(b)
        (network,) = inspect(b.spec.name)["NetworkSettings"]["Networks"]
        assert reachable_from_host(ip_on(b.spec.name)) and a.exec(f"{CONNECTS} {host} {gateway.port}").ok
        probe = a.exec(f"{CONNECTS} {ip_on(b.spec.name)} 8000", timeout=30)
        assert probe.exit_code != 0 and "reached" not in probe.stdout, probe
    finally:
        a.close(), b.close()  # off its network first: the gateway removes the network when it stops
        gateway.stop()
