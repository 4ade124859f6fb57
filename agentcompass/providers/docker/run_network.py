"""The network of a run's trials that allow internet: one bridge per run, inter-container traffic off.

On the engine's default bridge every container reaches every other: one trial could read another's
server, or a user's database container. Each run gets a bridge of its own, named after the run, made with
`enable_icc=false`: its containers reach the internet and this host (the model gateway) through the
bridge's gateway, never each other; other bridges (other runs, the user's containers, compose tasks' own
networks) are unreachable as the engine isolates bridges from each other. Every worker process and every
job of a sweep under one run name shares it (one address range, not one per process: the engine has few).
It carries the run's labels, so `agentcompass cleanup` removes what a killed run left; the run removes it
when it ends (not while a kept sandbox is still on it).
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
import threading
from typing import Any, Callable

from agentcompass.core.errors import InfraError
from agentcompass.providers.remote import one_line

ICC_OFF = {"com.docker.network.bridge.enable_icc": "false"}


def network_name(run_name: str) -> str:
    """A docker network name for the run: readable, and distinct for run names that read alike once cut."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "-", run_name)[:40].strip("-.") or "run"
    return f"ac-run-{safe}-{hashlib.sha256(run_name.encode()).hexdigest()[:6]}"


def missing_network(exc: Exception) -> bool:
    """The engine's answer when a container is created on a network that is gone (another job of the run
    removed it between its trials)."""
    return getattr(exc, "status_code", None) == 404 and "network" in str(exc).lower()


class RunNetwork:
    def __init__(self, api: Callable[[], Any]) -> None:
        self._api = api  # the provider's engine client, connected on first use
        self._lock = threading.Lock()
        self._made: set[str] = set()  # the networks known to exist (made here or found)

    def ensure(self, run_name: str, again: bool = False) -> str:
        """The run's network (its name), made on first use; `again`: it was found gone, make it anew."""
        import docker

        name = network_name(run_name)
        with self._lock:
            if again:
                self._made.discard(name)
            if name in self._made:
                return name
            api = self._api()
            if not any(n.get("Name") == name for n in api.networks(names=[name])):
                try:
                    api.create_network(name, driver="bridge", options=ICC_OFF, check_duplicate=True,
                                       labels={"agentcompass": "1", "run": run_name})
                except docker.errors.APIError as exc:
                    if exc.status_code != 409:  # 409: another worker of this run made it meanwhile
                        raise InfraError(f"cannot create the run's network {name}: {one_line(exc.explanation or exc)}") from exc
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
