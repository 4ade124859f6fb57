"""What every container of a trial is denied on docker, whatever the task's image or compose file says.

An agent we do not trust runs as root in its container. The engine's defaults leave it raw sockets (spoofed
packets, ARP games on the bridge), mknod (device nodes), setuid binaries that raise privileges, and as many
processes as the host allows. Each trial's container therefore gets: no new privileges (a setuid or
file-capability binary cannot raise them), the capabilities an agent never needs dropped, and a process
limit. What honest tasks need stays: CHOWN, DAC_OVERRIDE, FOWNER, FSETID (apt, dpkg, pip, tar), SETUID and
SETGID (apt's _apt user, su/runuser from root to a task's user), KILL, NET_BIND_SERVICE (a web server on
port 80), SYS_CHROOT and SETPCAP (daemons that drop their own privileges).

A compose file may ask for more (`privileged`, `cap_add`, host namespaces, devices) on the agent's container
or on a sidecar the agent reaches: either is the host's root within the agent's reach, so both are refused
before the run unless the user opts in (`allow_privileged`).
"""

from __future__ import annotations

from typing import Any

from agentcompass.core.errors import UserError
from agentcompass.core.sandbox import ContainerSpec, SandboxSpec
from agentcompass.providers.docker.settings import DockerSettings

# The engine's default set minus these. NET_RAW: raw and packet sockets (ping still works: the engine opens ICMP
# datagram sockets to every group, net.ipv4.ping_group_range, and iputils uses them). MKNOD: device nodes.
# AUDIT_WRITE: the host's audit log. SETFCAP: granting file capabilities (no-new-privileges voids them anyway).
DROPPED_CAPABILITIES = ("NET_RAW", "MKNOD", "AUDIT_WRITE", "SETFCAP")


def hardened_options(settings: DockerSettings, service: ContainerSpec | None = None) -> dict[str, Any]:
    """create_host_config keywords for one container of a trial (the agent's, or a sidecar's `service`).
    A service the user let keep its privileges (allow_privileged) keeps them: dropping what it asked for
    would break it."""
    privileged = bool(service and (service.privileged or service.cap_add))
    options: dict[str, Any] = {}
    if settings.pids_limit:
        options["pids_limit"] = settings.pids_limit
    if privileged:
        return options
    if settings.no_new_privileges:
        options["security_opt"] = ["no-new-privileges"]
    options["cap_drop"] = list(DROPPED_CAPABILITIES)
    return options


def privileges_asked(service: ContainerSpec) -> list[str]:
    """What a compose service asks for that hands its container the host: the compose keys, as written."""
    asked = []
    if service.privileged:
        asked.append("privileged: true")
    if service.cap_add:
        asked.append(f"cap_add: [{', '.join(service.cap_add)}]")
    if service.network_mode and service.network_mode.split(":")[0] == "host":
        asked.append(f"network_mode: {service.network_mode}")
    return asked


def refuse_privileges(spec: SandboxSpec, settings: DockerSettings) -> None:
    """Before the run: a compose task whose agent container or sidecar asks for the host's privileges is
    refused with one line, unless the user opted in with allow_privileged."""
    if settings.allow_privileged or not spec.compose:
        return
    for service in [spec.compose.client, *spec.compose.services]:
        asked = privileges_asked(service)
        if asked:
            role = "the agent's container" if service is spec.compose.client else f"sidecar {service.name}"
            raise UserError(f"task '{spec.name}' asks for {'; '.join(asked)} on {role} in its docker-compose file, "
                            "which would hand the agent this host; docker runs it only if you trust the task and the "
                            "agent (--env-params '{\"allow_privileged\": true}'), else leave the task out "
                            "(--benchmark-params '{\"sample_ids\": [...]}')")
