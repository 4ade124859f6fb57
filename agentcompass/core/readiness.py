"""Whether an env is ready to run trials: what `agentcompass env check` and `list envs` report.

Each provider class has `readiness(settings, live)`: without `live` it only looks (no network, fast
enough for `list envs`); with it, it asks the engine or the cloud. Facts name where each credential or
setting comes from, never a secret's value; steps say how to set up what is missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BASE_IMAGE = "agentcompass/base:bookworm"  # the offline base: scripts/build-base-image.sh


@dataclass
class Readiness:
    ready: bool = True
    facts: list[str] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)

    def fail(self, fact: str, *steps: str) -> "Readiness":
        self.ready = False
        self.facts.append(fact)
        self.steps.extend(steps)
        return self


def local_readiness(settings: dict[str, Any], live: bool, config_source: str = "") -> Readiness:
    """bubblewrap present (and, live, able to start a sandbox), unless isolation is `none`."""
    report = Readiness()
    isolation = settings.get("isolation") or "auto"
    bwrap = shutil.which("bwrap")
    if isolation == "none":
        report.facts.append("isolation: none (trials run as plain subprocesses)")
        return report
    if bwrap is None:
        if isolation == "bwrap":
            return report.fail("bubblewrap (bwrap) is not installed, and isolation is 'bwrap'",
                               "apt-get install bubblewrap", "or pass --env-params '{\"isolation\": \"none\"}'")
        report.facts.append("bubblewrap (bwrap) is not installed: trials run as plain subprocesses "
                            "(apt-get install bubblewrap isolates them)")
        return report
    report.facts.append(f"bubblewrap: {bwrap}")
    pasta = shutil.which("pasta")  # the network of internet-enabled tasks; without it they are refused, the rest run
    report.facts.append(f"pasta: {pasta}" if pasta else "pasta (apt-get install passt) is not installed: "
                        "tasks that allow internet are refused")
    if live:
        try:
            probe = subprocess.run([bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid",
                                    "true"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return report.fail(f"bubblewrap does not start: {exc}", "check that user namespaces are enabled")
        if probe.returncode != 0:
            return report.fail(f"bubblewrap does not start a sandbox: {' '.join(probe.stderr.split())[:200]}",
                               "enable unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1), "
                               "or pass --env-params '{\"isolation\": \"none\"}'")
        report.facts.append("bubblewrap starts a sandbox")
    return report


def docker_readiness(settings: dict[str, Any], live: bool, config_source: str = "") -> Readiness:
    """The docker SDK, an engine address, and (live) the engine's version, storage driver and free disk."""
    report = Readiness()
    import importlib.util

    if importlib.util.find_spec("docker") is None:
        from agentcompass.core.install import checkout

        return report.fail("the docker SDK is not installed", f"pip install -e '{checkout() or '.'}' (the agentcompass checkout)")
    host = os.environ.get("DOCKER_HOST")
    report.facts.append(f"engine: {host} (DOCKER_HOST)" if host else "engine: unix:///var/run/docker.sock (default)")
    if not host and not Path("/var/run/docker.sock").exists():
        return report.fail("no Docker engine socket at /var/run/docker.sock",
                           "install and start Docker (`sudo systemctl start docker`), or set DOCKER_HOST")
    if not live:
        return report
    import docker

    try:
        client = docker.from_env(timeout=30)
        version, info = client.version(), client.info()
    except docker.errors.DockerException as exc:
        return report.fail(f"the Docker engine does not answer ({' '.join(str(exc).split())[:200]})",
                           "start it (`sudo systemctl start docker`), or set DOCKER_HOST to one that runs")
    report.facts.append(f"engine version {version.get('Version')}, storage driver {info.get('Driver')}")
    root = info.get("DockerRootDir") or ""
    if not host and Path(root).is_dir():
        report.facts.append(f"free disk under {root}: {shutil.disk_usage(root).free / 2**30:.1f} GiB")
    try:
        client.images.get(BASE_IMAGE)
        report.facts.append(f"offline base image {BASE_IMAGE}: present")
    except docker.errors.ImageNotFound:
        report.facts.append(f"offline base image {BASE_IMAGE}: absent (the demo builds FROM a public base instead; "
                            "offline: scripts/build-base-image.sh)")
    except docker.errors.DockerException:
        pass
    return report
