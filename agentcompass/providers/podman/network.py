"""The network of a podman trial that may reach the internet: a bridge of the trial's own, isolated.

Where podman differs from docker: docker gives a run one bridge with inter-container traffic off
(`com.docker.network.bridge.enable_icc=false`, providers/docker/run_network.py). podman's compatible API
answers that option with a warning and ignores it (podman 4 and netavark have no per-network ICC switch),
so on one shared bridge every trial would reach every other. Each trial therefore gets a bridge of its own
made through podman's own (libpod) API with `isolate=true`, which netavark enforces between isolated
networks: a trial reaches the internet and this host, never another trial. What isolate does not cover on
podman 4 (netavark < 1.6 has no `isolate=strict`): a container on one of the user's networks that is not
isolated can still be reached. Each network carries the trial's labels (`cleanup` finds it) and goes when
the trial's container does.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from agentcompass.core.errors import InfraError
from agentcompass.providers.remote import one_line

# The libpod API version path: podman 4.0 is the oldest whose networks take `options` (isolate).
LIBPOD = "/v4.0.0/libpod"


def trial_network_name(sandbox_name: str) -> str:
    """A network name for the trial: readable, and distinct for trial names that read alike once cut."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "-", sandbox_name)[:60].strip("-.") or "trial"
    return f"ac-trial-{safe}-{hashlib.sha256(sandbox_name.encode()).hexdigest()[:6]}"


def create_isolated_network(api: Any, name: str, labels: dict[str, str]) -> None:
    """Make the trial's bridge with isolate=true (podman's libpod API: the compatible one drops the option).
    An existing one of that name (a retry of the trial) is used as it is."""
    body = {"name": name, "driver": "bridge", "options": {"isolate": "true"}, "labels": labels}
    try:
        response = api.post(f"{api.base_url}{LIBPOD}/networks/create", json=body, timeout=api.timeout)
    except OSError as exc:  # requests' connection errors are OSErrors
        raise InfraError(f"cannot create the trial's network {name}: {one_line(exc)[:200]}") from exc
    if response.status_code == 409:
        return
    if response.status_code >= 400:
        raise InfraError(f"cannot create the trial's network {name}: {one_line(response.text)[:300]}")


def remove_network(api: Any, name: str) -> None:
    """Gone with its trial; one still in use (a kept sandbox's) stays for `cleanup`."""
    import docker

    try:
        api.remove_network(name)
    except (docker.errors.DockerException, OSError):
        pass
