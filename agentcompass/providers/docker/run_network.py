"""The network of a run's trials that allow internet: one bridge per run, inter-container traffic off.

On the engine's default bridge every container reaches every other: one trial could read another's
server, or a user's database container. Each run (each provider instance: forked workers inherit it, so
they share it) gets a bridge of its own made with `enable_icc=false`: its containers reach the internet
and this host (the model gateway) through the bridge's gateway, never each other; other bridges (other
runs, the user's containers, compose tasks' own networks) are unreachable as the engine isolates
bridges from each other. It carries the run's labels, so `agentcompass cleanup` removes what a killed run
left; the run removes it when it ends.
"""

from __future__ import annotations

import ipaddress
import re
import threading
from typing import Any, Callable

from agentcompass.core.errors import InfraError
from agentcompass.providers.remote import one_line

ICC_OFF = {"com.docker.network.bridge.enable_icc": "false"}


class RunNetwork:
    def __init__(self, api: Callable[[], Any], instance: str) -> None:
        self._api = api  # the provider's engine client, connected on first use
        self._instance = instance  # unique per provider instance
        self._lock = threading.Lock()
        self._id: str | None = None

    def name_for(self, run_name: str) -> str:
        safe = re.sub(r"[^A-Za-z0-9_.-]", "-", run_name)[:40].strip("-.") or "run"
        return f"ac-{safe}-{self._instance}"

    def ensure(self, run_name: str) -> str:
        """The run's network (its id), made on first use; another worker of the run may have made it."""
        import docker

        with self._lock:
            if self._id is not None:
                return self._id
            api, name = self._api(), self.name_for(run_name)
            found = self._existing(api, name)
            if not found:
                try:
                    api.create_network(name, driver="bridge", options=ICC_OFF, check_duplicate=True,
                                       labels={"agentcompass": "1", "run": run_name})
                except docker.errors.APIError as exc:
                    if exc.status_code != 409:  # 409: a worker of this run made it meanwhile
                        raise InfraError(f"cannot create the run's network {name}: {one_line(exc.explanation or exc)}") from exc
                found = self._existing(api, name)
            if not found:
                raise InfraError(f"the run's network {name} vanished as it was made")
            self._id = found[0]  # the same one for every worker, should two have made one each
            return self._id

    @staticmethod
    def _existing(api: Any, name: str) -> list[str]:
        return sorted(n["Id"] for n in api.networks(names=[name]) if n.get("Name") == name)

    def host_address(self, network: str) -> str:
        """This host's IPv4 address on `network` (a name or id): its gateway, which its containers reach."""
        info = self._api().inspect_network(network)
        for config in info.get("IPAM", {}).get("Config") or []:
            if "." in (config.get("Gateway") or ""):
                return str(config["Gateway"])
            if "." in (config.get("Subnet") or ""):  # the engine gives a bridge the subnet's first address
                return str(next(ipaddress.ip_network(config["Subnet"]).hosts()))
        raise InfraError(f"network {info.get('Name')} has no IPv4 subnet to reach this host on")

    def remove(self) -> None:
        """At the run's end: this provider's networks, whichever worker made them; one a kept sandbox is still
        on stays (`agentcompass cleanup` removes it)."""
        import docker

        with self._lock:
            self._id = None
        api = self._api()
        try:
            networks = api.networks(filters={"label": ["agentcompass=1"]})
        except (docker.errors.DockerException, OSError):  # requests' connection errors are OSErrors
            return  # the engine is gone: `agentcompass cleanup` removes it later
        for network in networks:
            if str(network.get("Name", "")).endswith(f"-{self._instance}"):
                try:
                    api.remove_network(network["Id"])
                except docker.errors.APIError:
                    pass  # gone already, or still in use
