"""Harbor's network_mode = "allowlist" on docker: egress by host name, per phase.

The trial's container lives on an internal network of its own, which has no route out. Its one way out
is the trial's egress proxy (tinyproxy, reachable as `egress:8888`, named in the container's
http(s)_proxy variables), a container on both that network and the provider's: for an allowlist phase
it lets through only the phase's hosts; for a public phase it lets through everything and the container
also joins the provider's network (so tools that ignore proxies reach out too); for a no-network phase
there is no proxy at all. Each phase gets a proxy of its own, so its hosts are the phase's.

The proxy serves only the trial's own network (tinyproxy's Allow: a client elsewhere, another trial or a
container of the user on the provider's network, is refused) and tunnels (CONNECT) only to the web's ports:
an allowed host's SSH or SMTP port is not a way out.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from agentcompass.core.errors import InfraError
from agentcompass.providers.docker.compose import network_names, remove_network, remove_services
from agentcompass.providers.remote import one_line
from agentcompass.core.sandbox import SandboxSpec

if TYPE_CHECKING:
    from agentcompass.providers.docker.engine import DockerEngine

CONTEXT = Path(__file__).parent / "egress_proxy"
ALIAS, PORT = "egress", 8888
READY_WITHIN_S = 30.0
PROXY_URL = f"http://{ALIAS}:{PORT}"
# Both spellings: curl reads the lowercase ones, many others the uppercase.
PROXY_ENV = {name: PROXY_URL for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY")} | {
    "no_proxy": "localhost,127.0.0.1", "NO_PROXY": "localhost,127.0.0.1"}


def uses_egress(spec: SandboxSpec) -> bool:
    return "allowlist" in spec.network_modes


class Egress:
    """One trial's internal network and the proxy of its current phase."""

    def __init__(self, provider: "DockerEngine", spec: SandboxSpec) -> None:
        self.provider, self.spec = provider, spec
        self.api = provider.client.api
        self.network = spec.name  # the trial's own, as for compose tasks
        self.proxy = f"{spec.name}-egress"
        self.public = "none"  # the provider's network, the proxy's way out
        self.clients = ""  # the trial network's subnets: the only clients the proxy serves

    def open(self, public: str) -> None:
        import docker

        self.public = public
        self._remove_proxy()  # a killed earlier attempt of this trial may have left them
        for name in network_names(self.api, self.network):
            remove_network(self.api, name)
        try:
            self.api.create_network(self.network, driver="bridge", internal=True, labels=self.spec.labels)
            config = self.api.inspect_network(self.network).get("IPAM", {}).get("Config") or []
        except docker.errors.APIError as exc:
            raise InfraError(f"cannot create network {self.network}: {one_line(exc.explanation or exc)}") from exc
        self.clients = " ".join(c["Subnet"] for c in config if c.get("Subnet"))
        if not self.clients:
            raise InfraError(f"network {self.network} has no subnet for its egress proxy to serve")

    def enter(self, mode: str, hosts: tuple[str, ...]) -> None:
        """The phase's proxy: only `hosts` (allowlist), everything (public), or none (no-network)."""
        import docker

        self._remove_proxy()
        if mode == "no-network":
            return
        image = self.provider.egress_image(self.spec.log_dir)
        api, public = self.api, self.public
        env = {"ALLOWED_CLIENTS": self.clients}
        if mode == "allowlist":
            env["ALLOWED_HOSTS"] = " ".join(h.lower() for h in hosts)
        try:
            # tinyproxy needs no privilege at all: it runs as root in its container only to read its config.
            created = api.create_container(
                image=image, name=self.proxy, environment=env, labels={**self.spec.labels, "service": ALIAS}, detach=True,
                host_config=api.create_host_config(network_mode=public, init=True, cap_drop=["ALL"],
                                                   security_opt=["no-new-privileges"], pids_limit=256))
            api.connect_container_to_network(created["Id"], self.network, aliases=[ALIAS])
            api.start(created["Id"])
            self._await_listening(created["Id"])
        except docker.errors.APIError as exc:
            raise InfraError(f"cannot start the egress proxy of {self.spec.name}: {one_line(exc.explanation or exc)}") from exc

    def _await_listening(self, container: str) -> None:
        deadline = time.monotonic() + READY_WITHIN_S
        while time.monotonic() < deadline:
            if b"listening on" in self.api.logs(container).lower():
                return
            if not self.api.inspect_container(container)["State"].get("Running"):
                break
            time.sleep(0.1)
        log = self.api.logs(container).decode(errors="replace").strip().splitlines()[-3:]
        raise InfraError(f"the egress proxy of {self.spec.name} did not start: {' | '.join(log)}")

    def close(self) -> None:
        self._remove_proxy()
        remove_services(self.api, self.network, [])

    def _remove_proxy(self) -> None:
        import docker

        try:
            self.api.remove_container(self.proxy, force=True)
        except docker.errors.NotFound:
            pass
