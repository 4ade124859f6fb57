"""`env check podman`: the docker SDK, podman's API socket, and (live) the engine: version, rootful or
rootless, storage driver, cgroup version and missing controllers (rootless on v1: no limits) and the offline
base image."""

from __future__ import annotations

import importlib.util
import os
from typing import Any

from agentcompass.core.readiness import BASE_IMAGE, Readiness
from agentcompass.providers.podman.engine import (START_HINT, engine_facts, host_source, limits_lack, podman_host,
                                                  socket_path)


def podman_readiness(settings: dict[str, Any], live: bool, config_source: str = "") -> Readiness:
    report = Readiness()
    if importlib.util.find_spec("docker") is None:
        from agentcompass.core.install import checkout

        return report.fail("the docker SDK (which speaks podman's compatible API) is not installed",
                           f"pip install -e '{checkout() or '.'}' (the agentcompass checkout)")
    host = podman_host(settings.get("host"))
    report.facts.append(f"podman API: {host} ({host_source(settings.get('host'))})")
    path = socket_path(host)
    if path and not os.path.exists(path):
        return report.fail(f"no podman API socket at {path}", START_HINT)
    if not live:
        return report
    import docker

    try:
        client = docker.DockerClient(base_url=host, timeout=30)
        version, info = client.version(), client.info()
        facts = engine_facts(client.api)
    except (docker.errors.DockerException, OSError, ValueError) as exc:
        return report.fail(f"the podman API does not answer ({' '.join(str(exc).split())[:200]})", START_HINT)
    report.facts.append(f"podman {version.get('Version')}, {'rootless' if facts['rootless'] else 'rootful'}, storage "
                        f"driver {info.get('Driver')}, cgroup {facts['cgroup']}")
    lack = limits_lack(facts)
    if lack:
        report.facts.append(f"warning: {lack}: trials run without those limits (rootful podman, or cgroup v2 with the "
                            "controllers delegated to the user, sets them)")
    try:
        client.images.get(BASE_IMAGE)
        report.facts.append(f"offline base image {BASE_IMAGE}: present")
    except docker.errors.ImageNotFound:
        report.facts.append(f"offline base image {BASE_IMAGE}: absent (load it: docker save {BASE_IMAGE} | podman load, "
                            "or build it with scripts/build-base-image.sh)")
    except docker.errors.DockerException:
        pass
    return report
