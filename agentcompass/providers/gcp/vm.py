"""What one gcp trial VM is made of, as Compute's rules want it: its RFC 1035 name, its labels (keys
start with a letter), list filters with each expression parenthesised, its boot disk size, and the
start-up script that brings up the task container."""

from __future__ import annotations

import hashlib
import math
import re
import shlex
from typing import Any

from agentcompass.providers.docker.provider import KEEP_ALIVE
from agentcompass.core.sandbox import SandboxSpec

OS_AND_IMAGE_GB = 20  # room on the boot disk beside a task's storage_mb: the OS and the task image
STATE_DIR = "/var/lib/agentcompass"  # on the VM: start-up log, build context, container status
METADATA_SERVER = "169.254.169.254"  # the VM's identity, its metadata (the start-up script) and any account's token
METADATA_BLOCKED_STATUS = 97  # the container's status when the metadata server could not be blocked: no container


def metadata_block() -> str:
    """Shell lines that drop every packet a container sends to the metadata server, idempotently: Docker's
    DOCKER-USER chain (made here if Docker has not made it yet; Docker keeps it and jumps to it from FORWARD
    first) holds rules Docker never rewrites. Containers' traffic to the VM's own address is not forwarded, so
    this rule sees exactly what a task container sends out. Applied at every boot, before any container starts."""
    rule = f"DOCKER-USER -d {METADATA_SERVER}/32 -j DROP"
    return (f"iptables -w -N DOCKER-USER 2>/dev/null; iptables -w -C {rule} 2>/dev/null || iptables -w -I {rule}")


def label_value(text: str) -> str:
    """A GCP label value: lower-case [a-z0-9_-], at most 63 characters (long ones keep a hash)."""
    value = re.sub(r"[^a-z0-9_-]+", "-", text.lower())
    return value if len(value) <= 63 else f"{value[:46]}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def label_key(text: str) -> str:
    """A GCP label key: a label value that starts with a lower-case letter (GCP refuses `1team` with a 400)."""
    value = label_value(text)
    return value if value[:1].isalpha() else label_value(f"k-{text}")


def labels_filter(labels: dict[str, str]) -> str:
    """A Compute list filter matching every label: each expression in parentheses, as Compute requires."""
    return " AND ".join(f'(labels.{label_key(k)} = "{label_value(v)}")' for k, v in labels.items())


def disk_gb(configured: int, storage_mb: int | None) -> int:
    """The boot disk: the configured size, or more when the task's [environment] storage_mb needs it. The disk
    is the trial's own, so the task container gets at least what it asks for (the OS and the image aside)."""
    return max(configured, math.ceil((storage_mb or 0) / 1024) + OS_AND_IMAGE_GB)


def instance_name(name: str) -> str:
    """An RFC 1035 name for the VM (and its container): [a-z][-a-z0-9]*, at most 63, not ending in '-'."""
    value = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
    value = value if value[:1].isalpha() else f"ac-{value}"
    if len(value) > 63:
        value = f"{value[:46].rstrip('-')}-{hashlib.sha256(name.encode()).hexdigest()[:16]}"
    return value


def startup_script(name: str, spec: SandboxSpec, s: Any) -> str:
    """What the VM runs at boot: get the task image, start the task container, write its status."""
    q = shlex.quote
    state = f"{STATE_DIR}/{name}"
    if s.image or spec.image:
        image = q(s.image or spec.image or "")
        get_image = f"docker image inspect {image} >/dev/null 2>&1 || docker pull {image}"
    else:  # the orchestrator sends the build context over SSH once the VM is up
        image = q(f"agentcompass-task/{name}")
        build_args = "".join(f" --build-arg {q(f'{k}={v}')}" for k, v in sorted(spec.build_args.items()))
        get_image = (f"until [ -e {state}/context.tar ]; do sleep 1; done; mkdir -p {state}/context && "
                     f"tar -xf {state}/context.tar -C {state}/context && docker build{build_args} -t {image} {state}/context")
    cpus, memory = s.cpu or spec.cpus, s.memory or spec.memory_mb
    # A task whose phases switch networks starts on the bridge; the sandbox leaves it for a phase without one.
    network = "bridge" if spec.allow_internet or "public" in spec.network_modes else "none"
    # The image's ENTRYPOINT runs with the keep-alive as its arguments, as on docker (providers/docker/entrypoint.py);
    # one that exits instead (it ignores its arguments) gives way to the keep-alive alone.
    run = ["docker", "run", "-d", "--name", name, "--init", "--network", network, "-w", spec.workdir]
    run += [f"--cpus={cpus}"] if cpus else []
    run += [f"--memory={memory}m"] if memory else []
    run += [a for k, v in spec.labels.items() for a in ("--label", f"{k}={v}")]
    run += [a for k, v in spec.env.items() for a in ("-e", f"{k}={v}")]
    keep_alive_only = f"{' '.join(q(a) for a in run)} --entrypoint {KEEP_ALIVE[0]} {image} {' '.join(q(a) for a in KEEP_ALIVE[1:])}"
    if spec.image_entrypoint:
        start = (f"{' '.join(q(a) for a in run)} {image} {' '.join(q(a) for a in KEEP_ALIVE)} && {{ {settled(name)} || "
                 f"{{ docker rm -f {name} >/dev/null; {keep_alive_only}; }}; }}")
    else:  # the image's ENTRYPOINT is not the task's to run (spec.image_entrypoint)
        start = keep_alive_only
    return "\n".join([
        "#!/bin/bash", f"# agentcompass: bring up the task container of {name}",
        f"mkdir -p {state} && exec >>{state}/startup.log 2>&1",
        "# the metadata server is not the task's to reach; no container starts where it could be",
        f"{{ {metadata_block()}; }} || {{ echo 'cannot block the metadata server from containers'; "
        f"[ -e {state}/status ] || {{ echo {METADATA_BLOCKED_STATUS} > {state}/status.part && "
        f"mv {state}/status.part {state}/status; }}; exit 1; }}",
        f"[ -e {state}/status ] && exit 0  # a reboot starts no second container",
        f"( {get_image} ) && {{ docker rm -f {name} >/dev/null 2>&1; {start}; }}",
        f"echo $? > {state}/status.part && mv {state}/status.part {state}/status", ""])


def settled(container: str) -> str:
    """Shell: true once the container runs the keep-alive (or still runs after 2 s: a service that ignores its
    arguments), false when its entrypoint exited first."""
    running = f"[ \"$(docker inspect -f '{{{{.State.Running}}}}' {container})\" = true ]"
    return (f"{{ i=0; while [ $i -lt 20 ] && {running} && ! docker top {container} | grep -q 'sleep 3600'; "
            f"do i=$((i+1)); sleep 0.1; done; {running}; }}")
