"""docker-compose tasks on the docker provider: every service of a trial on the trial's own network.

What `docker compose up` would do for the task, done through the engine API: a bridge network
named after the trial (internal when the task has no internet), each service's container on it
under its service name (so the client reaches `server:8000`), named volumes shared by the
trial's services, and for each container its own entrypoint and command, tmpfs mounts, limits,
privileges (only where the user allowed them: hardening) and user. Everything carries the trial's
labels, so `cleanup` finds what a killed run left.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from agentcompass.core.errors import InfraError
from agentcompass.providers.docker.hardening import hardened_options
from agentcompass.providers.remote import one_line
from agentcompass.core.sandbox import ContainerSpec, SandboxSpec

if TYPE_CHECKING:
    import docker

    from agentcompass.providers.docker.engine import DockerEngine

HEALTHY_WITHIN_S = 300.0


def host_options(service: ContainerSpec, volume_prefix: str) -> dict[str, Any]:
    """create_host_config keywords for what a compose service says about its container."""
    options: dict[str, Any] = {}
    if service.tmpfs:
        options["tmpfs"] = dict(service.tmpfs)
    if service.privileged:
        options["privileged"] = True
    if service.cap_add:
        options["cap_add"] = list(service.cap_add)
    named = {f"{volume_prefix}-{name}": {"bind": target, "mode": "rw"}
             for target, name in service.volumes.items() if name}
    if named:
        options["binds"] = named
    return options


def create_options(service: ContainerSpec) -> dict[str, Any]:
    """create_container keywords: the service's own entrypoint, command, user and anonymous volumes."""
    return {
        "healthcheck": service.healthcheck,
        "entrypoint": service.entrypoint,
        "command": service.command,
        "user": service.user or "",
        "volumes": [target for target, name in service.volumes.items() if not name] or None,
    }


def networking(api: Any, network: str, alias: str) -> Any:
    return api.create_networking_config({network: api.create_endpoint_config(aliases=[alias])})


def create_network(api: Any, spec: SandboxSpec) -> None:
    """The trial's network and named volumes; a killed earlier run of the same trial may have left them."""
    import docker

    for name in network_names(api, spec.name):
        remove_network(api, name)
    try:
        api.create_network(spec.name, driver="bridge", internal=not spec.allow_internet, labels=spec.labels)
        for volume in volume_names(spec):
            api.create_volume(volume, labels=spec.labels)
    except docker.errors.APIError as exc:
        raise InfraError(f"cannot create network {spec.name}: {one_line(exc.explanation or exc)}") from exc


def volume_names(spec: SandboxSpec) -> set[str]:
    compose = spec.compose
    containers = [compose.client, *compose.services] if compose else []
    return {f"{spec.name}-{name}" for c in containers for name in c.volumes.values() if name}


def network_names(api: Any, name: str) -> list[str]:
    return [n["Id"] for n in api.networks(names=[name]) if n.get("Name") == name]


def remove_network(api: Any, network: str) -> None:
    import docker

    try:
        for container in api.inspect_network(network).get("Containers") or {}:
            api.remove_container(container, force=True, v=True)
        api.remove_network(network)
    except docker.errors.NotFound:
        pass


def start_services(provider: "DockerEngine", spec: SandboxSpec) -> list[str]:
    """Build or pull, create and start every service but the client; returns their container ids."""
    import docker

    api = provider.client.api
    started: list[str] = []
    try:
        for service in spec.compose.services if spec.compose else []:
            await_dependencies(api, spec, service)
            image = provider.service_image(service, spec.log_dir)
            name = f"{spec.name}-{service.name}"
            cpus = service.cpus
            host_config = api.create_host_config(
                network_mode=service.network_mode or spec.name,
                nano_cpus=int(cpus * 1e9) if cpus else None,
                mem_limit=f"{service.memory_mb}m" if service.memory_mb else None,
                **host_options(service, spec.name), **hardened_options(provider.settings, service))
            created = api.create_container(
                image=image, name=name, environment=service.env, working_dir=service.workdir,
                labels={**spec.labels, "service": service.name}, host_config=host_config, detach=True,
                networking_config=None if service.network_mode else networking(api, spec.name, service.name),
                **create_options(service))
            started.append(created["Id"])
            api.start(created["Id"])
        for service in spec.compose.services if spec.compose else []:
            if service.healthcheck:
                wait_healthy(api, f"{spec.name}-{service.name}", service.name)
    except docker.errors.APIError as exc:
        remove_services(api, spec.name, started)
        raise InfraError(f"cannot start service {service.name} of {spec.name}: {one_line(exc.explanation or exc)}") from exc
    except BaseException:
        remove_services(api, spec.name, started)
        raise
    return started


def await_dependencies(api: Any, spec: SandboxSpec, service: ContainerSpec) -> None:
    """Compose's depends_on conditions before `service` starts: service_healthy waits for the healthcheck,
    service_completed_successfully for an exit 0 (its dependencies were started before it)."""
    checks = {s.name: s.healthcheck for s in spec.compose.services} if spec.compose else {}
    for name, condition in service.depends_on.items():
        if condition == "service_healthy" and checks.get(name):
            wait_healthy(api, f"{spec.name}-{name}", name)
        elif condition == "service_completed_successfully":
            wait_completed(api, f"{spec.name}-{name}", name)


def wait_completed(api: Any, container: str, service: str) -> None:
    deadline = time.monotonic() + HEALTHY_WITHIN_S
    while time.monotonic() < deadline:
        state = api.inspect_container(container)["State"]
        if not state.get("Running"):
            if state.get("ExitCode") == 0:
                return
            raise InfraError(f"service {service} exited {state.get('ExitCode')}; a service depends on its success")
        time.sleep(0.5)
    raise InfraError(f"service {service} did not complete within {HEALTHY_WITHIN_S:.0f}s")


def wait_healthy(api: Any, container: str, service: str) -> None:
    """Wait for a service's healthcheck to pass, as compose's `depends_on: condition: service_healthy` does."""
    deadline = time.monotonic() + HEALTHY_WITHIN_S
    while time.monotonic() < deadline:
        state = api.inspect_container(container)["State"]
        status = (state.get("Health") or {}).get("Status")
        if status == "healthy":
            return
        if status == "unhealthy" or not state.get("Running"):
            break
        time.sleep(0.5)
    raise InfraError(f"service {service} did not become healthy (its healthcheck) within {HEALTHY_WITHIN_S:.0f}s")


def remove_services(api: Any, network: str, containers: list[str], volumes: set[str] | None = None) -> None:
    """Remove the services' containers, the trial's network and its named volumes (best effort, idempotent)."""
    import docker

    for container in containers:
        try:
            api.remove_container(container, force=True, v=True)
        except docker.errors.APIError:
            pass  # gone already, or going
    for name in network_names(api, network):
        try:
            remove_network(api, name)
        except docker.errors.APIError:
            pass
    for volume in volumes or ():
        try:
            api.remove_volume(volume, force=True)
        except docker.errors.APIError:
            pass


def cleanup_networks(client: "docker.DockerClient", labels: list[str]) -> None:
    """Networks and volumes of trials a killed run left behind (their containers are removed first)."""
    api = client.api
    for network in api.networks(filters={"label": labels}):
        remove_services(api, network["Name"], [])
    for volume in (api.volumes(filters={"label": labels}) or {}).get("Volumes") or []:
        try:
            api.remove_volume(volume["Name"], force=True)
        except Exception:  # in use by a container of a run still going: leave it
            pass
