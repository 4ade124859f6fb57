"""The network of an internet-enabled bubblewrap command: a namespace of its own, never the host's.

Every bwrap command gets a fresh network namespace. With internet allowed, pasta (Debian package
`passt`) connects that namespace to the outside through ordinary sockets of this host, user-mode:
outbound TCP, UDP and ICMP reach what this host reaches, under the host's addresses. What pasta is
told, and why:

- `--no-map-gw`: pasta's default maps the namespace's gateway address onto the host's loopback,
  which would open every service listening on 127.0.0.1 (the results browser, a Docker engine on
  TCP, databases) to the task;
- `-t none -u none -T PORTS -U none`: no port of the host is forwarded either way except the ones
  the runner names (the model gateway's, which listens on the host's loopback); pasta's default
  `auto` would forward every port bound on the host;
- abstract Unix sockets belong to a network namespace, so the host's (X11, D-Bus, containerd's)
  are out of reach as well;
- a host whose resolver listens on its loopback (systemd-resolved's 127.0.0.53) would leave the
  namespace without DNS: then `--dns-forward` sends the queries the namespace addresses to its
  gateway on to that resolver, and the sandbox's /etc/resolv.conf names the gateway (port 53 of
  that one address, nothing else of the loopback).

pasta runs as the user agentcompass runs as (as root it must stay root: the Debian build drops to
`nobody` before it joins the namespace, and then cannot) and ends with the command; it carries the
command's reaper mark, so it ends too if agentcompass is killed.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import os
import select
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from agentcompass.core.errors import InfraError
from agentcompass.providers.local.procs import kill_marked
from agentcompass.providers.remote import EXEC_MARK

INFO_TIMEOUT_S = 30.0  # bwrap reports its namespaces within milliseconds; a hung set-up is an infra error
PASTA_TIMEOUT_S = 30.0
MISSING = ("an internet-enabled task on env local needs user-mode networking (pasta, Debian package passt): "
           "apt-get install passt, or run it with --env docker")


RESOLV_CONF = "/etc/resolv.conf"
ROUTES = "/proc/net/route"


@dataclass(frozen=True)
class DnsForward:
    """DNS for a host whose resolver is on its loopback: what pasta is told and what the sandbox reads."""
    pasta_args: tuple[str, ...]
    resolv_conf: str  # the sandbox's /etc/resolv.conf


def default_gateway() -> str | None:
    """The host's IPv4 default gateway (pasta gives the namespace the same one)."""
    try:
        lines = Path(ROUTES).read_text().splitlines()[1:]
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) > 2 and fields[1] == "00000000" and fields[2] != "00000000":
            return str(ipaddress.IPv4Address(bytes.fromhex(fields[2])[::-1]))
    return None


@functools.lru_cache(maxsize=1)
def dns_forward() -> DnsForward | None:
    """None when the host's resolvers are reachable from the namespace as they are (not loopback)."""
    try:
        lines = Path(RESOLV_CONF).read_text().splitlines()
    except OSError:
        return None
    servers = [line.split()[1] for line in lines if line.startswith("nameserver") and len(line.split()) > 1]
    try:
        local = [s for s in servers if ipaddress.ip_address(s.split("%")[0]).is_loopback]
    except ValueError:
        return None
    gateway = default_gateway()
    if not servers or len(local) < len(servers) or gateway is None:
        return None
    kept = [line for line in lines if line.startswith(("search", "domain", "options"))]
    return DnsForward(("--dns", local[0], "--dns-forward", gateway), "\n".join([f"nameserver {gateway}", *kept]) + "\n")


def has_user_networking() -> bool:
    return shutil.which("pasta") is not None


def read_child_pid(info_fd: int, deadline: float) -> int | None:
    """The sandbox's pid from bwrap's --info-fd JSON; None when bwrap ended before it had one (its
    set-up failed, which the caller retries like any set-up failure)."""
    data = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([info_fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        chunk = os.read(info_fd, 4096)
        if not chunk:
            return None
        data += chunk
        try:
            return int(json.loads(data)["child-pid"])
        except (ValueError, KeyError):
            continue  # a partial document: read on
    raise InfraError("bubblewrap did not report its sandbox's namespaces in time")


def connect(child_pid: int, forwarded_ports: tuple[int, ...], mark: str, internet: bool = True) -> int:
    """Give the network namespace of child_pid an outbound network through pasta (without internet: none,
    its interface left unconfigured) and, on its loopback, the host's forwarded_ports; returns pasta's pid
    once the namespace is ready."""
    namespaces: list[int] = []
    try:
        namespaces.append(os.open(f"/proc/{child_pid}/ns/net", os.O_RDONLY))
        owner = ["--runas", "0"] if os.geteuid() == 0 else []
        if os.geteuid() != 0:  # bwrap made a user namespace for us; its network namespace belongs to it
            namespaces.append(os.open(f"/proc/{child_pid}/ns/user", os.O_RDONLY))
            owner = ["--userns", f"/proc/self/fd/{namespaces[1]}"]
    except OSError as exc:
        for fd in namespaces:
            os.close(fd)
        raise InfraError(f"cannot open the sandbox's network namespace: {exc}") from exc
    ports = ",".join(map(str, forwarded_ports)) or "none"
    pid_r, pid_w = os.pipe()  # pasta writes its daemon's pid here (a pid file that is a pipe)
    dns = dns_forward() if internet else None
    argv = ["pasta", "--quiet", *(["--config-net"] if internet else []), *(dns.pasta_args if dns else ()), "--no-map-gw", "-t", "none", "-u", "none", "-T", ports, "-U", "none",
            *owner, "--pid", f"/proc/self/fd/{pid_w}", "--netns", f"/proc/self/fd/{namespaces[0]}"]
    try:
        # pasta configures the namespace, then leaves a daemon behind and exits 0: the network is ready.
        done = subprocess.run(argv, env={EXEC_MARK: mark, "PATH": os.environ.get("PATH", "/usr/bin:/bin")},
                              pass_fds=(*namespaces, pid_w), capture_output=True, timeout=PASTA_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        disconnect(None, mark)
        raise InfraError(f"user-mode networking (pasta) did not start: {exc}") from exc
    finally:
        for fd in (*namespaces, pid_w):
            os.close(fd)
    try:
        os.set_blocking(pid_r, False)
        written = os.read(pid_r, 64).decode(errors="replace").strip()
    except BlockingIOError:
        written = ""
    finally:
        os.close(pid_r)
    daemon = int(written) if written.isdigit() else None
    if done.returncode != 0 or daemon is None:
        disconnect(daemon, mark)
        said = [line for line in done.stderr.decode(errors="replace").splitlines() if "syslog" not in line]
        raise InfraError(f"user-mode networking (pasta) did not start: {' '.join(said)[-300:] or 'no pid'}")
    return daemon


def disconnect(daemon: int | None, mark: str) -> None:
    """End the command's pasta: by the pid it reported, or, when it reported none (it failed half-way),
    by its mark (the only process that carries it under bwrap), which costs a scan of /proc."""
    if daemon is None:
        kill_marked(mark)
        return
    try:
        os.kill(daemon, signal.SIGKILL)
    except OSError:
        pass
