"""The network of a run's trials that allow internet: one bridge per run, inter-container traffic off.

On the engine's default bridge every container reaches every other: one trial could read another's
server, or a user's database container. Each run gets a bridge of its own, named after the run, made with
`enable_icc=false`: its containers reach the internet and this host (the model gateway) through the
bridge's gateway, never each other; other bridges (other runs, the user's containers, compose tasks' own
networks) are unreachable as the engine isolates bridges from each other. Every worker process and every
job of a sweep under one run name shares it (one address range, not one per process: the engine has few).
It carries the run's labels, so `agentcompass cleanup` removes what a killed run left; the run removes it
when it ends (not while a kept sandbox is still on it).

A run killed with SIGKILL leaves its network, and the engine's default address pools hold about 31 bridges: so
before a run makes its own, it removes the run networks (and the model gateway's internal ones) of runs that are
no longer live: no container on them and the process that made them (its `agentcompass.owner` label) ended on this
host. A network another process of a live run still uses is never one (a container on it, or its maker alive); one
whose maker died while a sibling worker of its run goes on may go, and that sibling makes it anew (on create and
on start). When the engine has no address range left all the same, the run stops with one line that says to run
`agentcompass cleanup`.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
import threading
from typing import Any, Callable

from agentcompass.core.errors import FatalInfraError, InfraError
from agentcompass.providers.remote import OWNER_LABEL, one_line, owner_is_gone

ICC_OFF = {"com.docker.network.bridge.enable_icc": "false"}
REAPED_PREFIXES = ("ac-run-", "ac-gateway-")  # networks a run shares among its trials (not a compose trial's own)
NO_ADDRESSES = "address pool"  # the engine's "could not find an available, non-overlapping IPv4 address pool ..."


def network_name(run_name: str) -> str:
    """A docker network name for the run: readable, and distinct for run names that read alike once cut."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "-", run_name)[:40].strip("-.") or "run"
    return f"ac-run-{safe}-{hashlib.sha256(run_name.encode()).hexdigest()[:6]}"


def leftover_networks(api: Any) -> list[str]:
    """Run networks (and gateway networks) of runs that are no longer live: no container on them, and made by a
    process of this host that has ended. One without an owner label (an older version) is never sure: kept."""
    import docker

    gone = []
    for listed in api.networks(filters={"label": ["agentcompass=1"]}) or []:
        name, owner = listed.get("Name") or "", (listed.get("Labels") or {}).get(OWNER_LABEL)
        if not name.startswith(REAPED_PREFIXES) or not owner or not owner_is_gone(owner):
            continue
        try:  # the list leaves Containers empty: only an inspect says who is on it
            if api.inspect_network(listed["Id"]).get("Containers"):
                continue
        except docker.errors.NotFound:
            continue
        gone.append(name)
    return gone


def reap_leftover_networks(api: Any) -> int:
    """Remove leftover_networks (a container attached meanwhile keeps its network: the engine refuses); how many."""
    import docker

    removed = 0
    for name in leftover_networks(api):
        try:
            api.remove_network(name)
            removed += 1
        except docker.errors.APIError:
            pass
    return removed


def create_shared_network(api: Any, name: str, labels: dict[str, str], **options: Any) -> None:
    """Make a network the run's trials share, after removing what dead runs left (the engine's address ranges are
    few); 409 (another process of the run made it meanwhile) is fine. No range left: one line that says what to do."""
    import docker

    reap_leftover_networks(api)
    try:
        api.create_network(name, driver="bridge", check_duplicate=True, labels=labels, **options)
    except docker.errors.APIError as exc:
        if exc.status_code == 409:
            return
        text = one_line(exc.explanation or exc)
        if NO_ADDRESSES in text:
            ours = sum(1 for n in api.networks(filters={"label": ["agentcompass=1"]}) or [])
            raise FatalInfraError(f"the Docker engine has no address range left for network {name} ({ours} agentcompass "
                                  "networks hold some); remove those of runs that are over with `agentcompass cleanup "
                                  "--env docker` (or `docker network prune`), then run again") from exc
        raise InfraError(f"cannot create network {name}: {text}") from exc


def missing_network(exc: Exception) -> bool:
    """The engine's answer when a container is created on a network that is gone (another job of the run
    removed it between its trials)."""
    return getattr(exc, "status_code", None) == 404 and "network" in str(exc).lower()


class RunNetwork:
    def __init__(self, api: Callable[[], Any], owner: str = "") -> None:
        self._api = api  # the provider's engine client, connected on first use
        self._owner = owner  # the process that makes a network (remote.process_owner): a dead one's may be reaped
        self._lock = threading.Lock()
        self._made: set[str] = set()  # the networks known to exist (made here or found)

    def ensure(self, run_name: str, again: bool = False) -> str:
        """The run's network (its name), made on first use; `again`: it was found gone, make it anew."""
        name = network_name(run_name)
        with self._lock:
            if again:
                self._made.discard(name)
            if name in self._made:
                return name
            api = self._api()
            if not any(n.get("Name") == name for n in api.networks(names=[name])):
                labels = {"agentcompass": "1", "run": run_name, **({OWNER_LABEL: self._owner} if self._owner else {})}
                create_shared_network(api, name, labels, options=ICC_OFF)
            self._made.add(name)
            return name

    def host_address(self, network: str) -> str:
        """This host's IPv4 address on `network` (a name or id): its gateway, which its containers reach."""
        info = self._api().inspect_network(network)
        for config in info.get("IPAM", {}).get("Config") or []:
            if "." in (config.get("Gateway") or ""):
                return str(config["Gateway"])
            if "." in (config.get("Subnet") or ""):  # the engine gives a bridge the subnet's first address
                return str(next(ipaddress.ip_network(config["Subnet"]).hosts()))
        raise InfraError(f"network {info.get('Name')} has no IPv4 subnet to reach this host on")

    def remove(self, run_name: str) -> None:
        """At the run's end; one a kept sandbox (or another job of the run) is still on stays."""
        import docker

        name = network_name(run_name)
        with self._lock:
            self._made.discard(name)
        try:
            self._api().remove_network(name)
        except (docker.errors.DockerException, OSError):  # requests' connection errors are OSErrors
            pass  # gone already, still in use, or the engine is gone: `agentcompass cleanup` removes it
