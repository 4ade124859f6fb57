"""The run's shared network on the real engine: a start that finds it gone (another job of the run removed it
between this container's create and start) makes it anew, and a new run reaps the networks killed runs left."""

from __future__ import annotations

import subprocess
import sys

import docker
import pytest

from docker_sandbox import plain_context, unique  # noqa: F401  (plain_context: a module fixture)
from agentcompass.core.sandbox import SandboxSpec
from agentcompass.providers.docker.run_network import network_name
from agentcompass.providers.remote import OWNER_LABEL, process_owner


@pytest.fixture
def api(base_image):
    return docker.from_env().api


def network_exists(api, name: str) -> bool:
    return any(n["Name"] == name for n in api.networks(names=[name]))


def dead_owner() -> str:
    """The owner label of a process of this host that has ended."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        owner = process_owner("dead", proc.pid)
    finally:
        proc.kill()
        proc.wait()
    return owner


def test_a_start_after_another_job_removed_the_run_network_makes_it_anew(api, plain_context, tmp_path):  # noqa: F811
    from agentcompass.providers.docker.provider import DockerProvider

    run = unique("pytest-race")
    provider = DockerProvider()
    real_start, removed = provider.client.api.start, []

    def start_after_the_other_job_ended(container, *args, **kwargs):
        if not removed:  # the other job ends here: no container is on the network yet (this one is only created)
            api.remove_network(network_name(run))
            removed.append(True)
        return real_start(container, *args, **kwargs)

    provider.client.api.start = start_after_the_other_job_ended
    spec = SandboxSpec(name=unique("ac-test-race"), build_context=plain_context, allow_internet=True,
                       labels={"agentcompass": "1", "run": run}, log_dir=tmp_path)
    try:
        box = provider.open(spec)
        try:
            assert removed and box.exec("echo up", timeout=60).stdout.strip() == "up"
            attached = api.inspect_container(box.id)["NetworkSettings"]["Networks"]
            assert list(attached) == [network_name(run)]
        finally:
            box.close()
    finally:
        provider.end_run(run)
    assert not network_exists(api, network_name(run))


def test_a_new_run_reaps_the_networks_of_runs_no_longer_live(api, plain_context, tmp_path):  # noqa: F811
    from agentcompass.providers.docker.provider import DockerProvider

    tag = unique("pytest-leak")
    leaked, live, in_use, unowned = (f"ac-run-{tag}-{kind}" for kind in ("leaked", "live", "inuse", "unowned"))
    gateway_leak = f"ac-gateway-{tag}-1"
    labels = {"agentcompass": "1", "run": tag}
    gone = dead_owner()
    made = [leaked, live, in_use, unowned, gateway_leak]
    api.create_network(leaked, labels={**labels, OWNER_LABEL: gone})
    api.create_network(gateway_leak, internal=True, labels={**labels, OWNER_LABEL: gone})
    api.create_network(live, labels={**labels, OWNER_LABEL: process_owner("alive")})  # a live run between its trials
    api.create_network(unowned, labels=labels)  # an older version's: no owner to ask
    api.create_network(in_use, labels={**labels, OWNER_LABEL: gone})  # its maker died, a sibling's container is on it
    holder = api.create_container("agentcompass/base:bookworm", command=["sleep", "300"], name=unique("ac-test-holder"),
                                  labels=labels, host_config=api.create_host_config(network_mode=in_use))
    api.start(holder["Id"])
    run = unique("pytest-reaper")
    provider = DockerProvider()
    try:
        box = provider.open(SandboxSpec(name=unique("ac-test-reaper"), build_context=plain_context, allow_internet=True,
                                        labels={"agentcompass": "1", "run": run}, log_dir=tmp_path))
        box.close()
        assert not network_exists(api, leaked) and not network_exists(api, gateway_leak)
        assert network_exists(api, live) and network_exists(api, in_use) and network_exists(api, unowned)
        mine = api.inspect_network(network_name(run))["Labels"]
        assert mine[OWNER_LABEL].split("/")[:2] == process_owner("").split("/")[:2]  # this process made it
    finally:
        provider.end_run(run)
        api.remove_container(holder["Id"], force=True)
        for name in made:
            if network_exists(api, name):
                api.remove_network(name)
