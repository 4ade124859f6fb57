"""A docker network made with `--subnet` alone, for tests: on Debian's docker.io (20.10) its IPAM then names no
gateway, as on the engine's default bridge; only each container's endpoint names it."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest


@contextmanager
def subnet_only_network(prefix: str, first_octet: int) -> Iterator[tuple[str, str]]:
    """(name, this host's address on it); removed afterwards. Tries /24s until one no other network holds."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    for second in range(first_octet, first_octet + 50):
        subnet = f"10.{second}.{os.getpid() % 250}"
        made = subprocess.run(["docker", "network", "create", "--subnet", f"{subnet}.0/24", "--label", "agentcompass=1",
                               name], capture_output=True, text=True)
        if made.returncode == 0:
            break
    else:
        pytest.fail(f"cannot create a docker network: {made.stderr}")
    try:
        yield name, f"{subnet}.1"
    finally:
        subprocess.run(["docker", "network", "rm", name], capture_output=True)
