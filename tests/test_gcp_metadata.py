"""A gcp trial VM holds no token for an agent to take: no service account unless the user names one (then only
the scopes named, read-only storage by default), and its task containers cannot reach the metadata server: the
start-up script drops their packets to 169.254.169.254 before any container starts. The rule itself is run in
network namespaces on this machine (a "VM" forwarding a "container's" packets to a "metadata server"), with the
honest control that the container still reaches another address."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import fake_gcp
from conftest import skip_or_fail
from gcp_vms import provider, spec, sshd  # noqa: F401  (fixtures)
from gcp_vms import fake as fake  # noqa: F401,PLC0414  (fixture)

READ_ONLY = "https://www.googleapis.com/auth/devstorage.read_only"
DROP = "DOCKER-USER -d 169.254.169.254/32 -j DROP"


def inserted(fake_module) -> list:
    """The instance of each insert request the fake was sent, as the SDK would send it."""
    return [kwargs["instance_resource"] or args[0].instance_resource
            for call, args, kwargs in fake_module.calls if call == "InstancesClient.insert"]


def test_a_vm_gets_no_service_account_unless_one_is_named(fake, sshd):  # noqa: F811
    box = provider(sshd).open(spec("nosa"))
    box.close()
    (vm,) = inserted(fake)
    assert list(vm.service_accounts) == []  # the metadata server has no token to give


def test_a_named_service_account_gets_only_the_scopes_it_needs():
    pytest.importorskip("google.cloud.compute_v1")
    from agentcompass.providers.gcp.provider import GcpProvider
    from agentcompass.providers.gcp.ssh import EphemeralKey

    def accounts(**settings) -> list[tuple[str, list[str]]]:
        vm = GcpProvider(**settings).instance_resource("us-central1-a", "ac-x", spec(), EphemeralKey())
        return [(a.email, list(a.scopes)) for a in vm.service_accounts]

    assert accounts() == [] and accounts(service_account="none") == []
    assert accounts(service_account="puller@p.iam.gserviceaccount.com") == [("puller@p.iam.gserviceaccount.com", [READ_ONLY])]
    assert accounts(service_account="default") == [("default", [READ_ONLY])]  # never cloud-platform unless asked
    wide = "https://www.googleapis.com/auth/cloud-platform"
    assert accounts(service_account="default", service_account_scopes=[wide]) == [("default", [wide])]


def test_the_metadata_server_is_blocked_before_the_task_container_starts(fake, sshd):  # noqa: F811
    box = provider(sshd).open(spec("meta", allow_internet=True))
    try:
        state = Path(fake_gcp.STATE_DIR) / box.id
        events = (state / fake_gcp.VM_EVENTS).read_text().splitlines()
        rules = (state / fake_gcp.VM_RULES).read_text().splitlines()
    finally:
        box.close()
    assert DROP in rules
    assert f"iptables -I {DROP}" in events and "docker run" in events
    assert events.index(f"iptables -I {DROP}") < events.index("docker run")


def test_no_container_starts_where_the_metadata_server_cannot_be_blocked(fake, sshd, monkeypatch):  # noqa: F811
    from agentcompass.core.errors import InfraError
    from gcp_vms import containers

    monkeypatch.setenv(fake_gcp.NO_FIREWALL_ENV, "1")
    with pytest.raises(InfraError, match="cannot block the metadata server"):
        provider(sshd).open(spec("nofw"))
    assert containers() == []


# -- the rule, run for real in network namespaces ------------------------------------------------------
def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def in_ns(ns: str, *command: str, **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", "netns", "exec", ns, *command], capture_output=True, text=True, **kwargs)


@pytest.fixture
def vm_network() -> Iterator[dict[str, str]]:
    """Three namespaces: `vm` forwards between `ctr` (a task container, 10.231.0.2) and `meta`, which holds the
    metadata server's address and another one (169.254.170.10), each serving HTTP on port 8080. `vm` has a
    DOCKER-USER chain jumped to from FORWARD, as Docker sets it up."""
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("iptables"):
        skip_or_fail("needs root, iproute2 and iptables for network namespaces")
    tag = uuid.uuid4().hex[:6]
    names = {role: f"acmeta-{role}-{tag}" for role in ("vm", "ctr", "meta")}
    server = None
    try:
        for ns in names.values():
            ip("netns", "add", ns)
        vm, ctr, meta = names["vm"], names["ctr"], names["meta"]
        ip("link", "add", f"c{tag}", "netns", ctr, "type", "veth", "peer", "name", f"v{tag}", "netns", vm)
        ip("link", "add", f"m{tag}", "netns", meta, "type", "veth", "peer", "name", f"w{tag}", "netns", vm)
        for ns, link, address in ((ctr, f"c{tag}", "10.231.0.2/24"), (vm, f"v{tag}", "10.231.0.1/24"),
                                  (vm, f"w{tag}", "169.254.0.1/16"), (meta, f"m{tag}", "169.254.169.254/16")):
            ip("-n", ns, "addr", "add", address, "dev", link)
            ip("-n", ns, "link", "set", link, "up")
        ip("-n", meta, "addr", "add", "169.254.170.10/16", "dev", f"m{tag}")
        ip("-n", ctr, "route", "add", "default", "via", "10.231.0.1")
        ip("-n", meta, "route", "add", "10.231.0.0/24", "via", "169.254.0.1")
        in_ns(vm, "sysctl", "-qw", "net.ipv4.ip_forward=1", check=True)
        for rule in (["-N", "DOCKER-USER"], ["-I", "FORWARD", "-j", "DOCKER-USER"]):
            in_ns(vm, "iptables", "-w", *rule, check=True)
        server = subprocess.Popen(["ip", "netns", "exec", meta, "python3", "-m", "http.server", "8080", "--bind", "0.0.0.0"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(100):
            if in_ns(ctr, *fetch("169.254.170.10")).returncode == 0:
                break
        yield names
    finally:
        if server is not None:
            server.kill()
            server.wait()
        for ns in names.values():
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def fetch(address: str) -> list[str]:
    return ["python3", "-c", f"import urllib.request; urllib.request.urlopen('http://{address}:8080/', timeout=2)"]


def test_the_start_up_rule_drops_container_traffic_to_the_metadata_server(vm_network):
    from agentcompass.providers.gcp.vm import metadata_block

    ctr, vm = vm_network["ctr"], vm_network["vm"]
    assert in_ns(ctr, *fetch("169.254.169.254")).returncode == 0  # the control: without the rule it is reachable
    for _ in range(2):  # a second boot adds no second rule
        done = in_ns(vm, "bash", "-c", metadata_block())
        assert done.returncode == 0, done.stderr
    listed = in_ns(vm, "iptables", "-S", "DOCKER-USER").stdout
    assert listed.count("169.254.169.254") == 1
    assert in_ns(ctr, *fetch("169.254.169.254")).returncode != 0  # dropped
    assert in_ns(ctr, *fetch("169.254.170.10")).returncode == 0  # the rest of the container's network still works
