"""What a bubblewrap sandbox sees of the host: an allowlist, never the host's root.

A task's commands need the system's programs and libraries (/usr and the merged-/usr links), a few
files of /etc (users, name resolution, the dynamic linker's cache, certificates, locales), and the
Python environment agentcompass runs from (a task may be pointed at that interpreter). Everything
else of the host stays out: /run and /var (the Docker, containerd and D-Bus sockets live there),
/home, /root, /srv, /opt, /mnt, /media, the host's /tmp, /sys, and every file of /etc not listed
below (shadow files, SSH host keys, registry and package-manager credentials such as pip.conf or
npmrc). Benchmark sources, results directories and caches are therefore invisible wherever they
live; the sandbox sees what the runner uploaded into its workspace and nothing else of the user's.
"""

from __future__ import annotations

import functools
import glob
import os
import sys
from pathlib import Path

# Top-level system folders shown read-only (or, when the host has merged /usr, as the same links).
SYSTEM_TREES = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")

# Files and folders of /etc a task may read: what glibc, the shells, Python, TLS clients, tmux and
# locales look for. Credentials and host keys are not here on purpose (shadow, gshadow, ssh/,
# ssl/private, sudoers, pip.conf, npmrc, wgetrc, gitconfig, docker/, containerd/, machine-id).
ETC_ALLOWED = (
    "passwd", "group", "nsswitch.conf", "hosts", "hostname", "resolv.conf", "host.conf", "gai.conf",
    "networks", "protocols", "services", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime",
    "timezone", "locale.alias", "locale.gen", "default/locale", "alternatives", "ssl/certs", "ssl/openssl.cnf",
    "ca-certificates.conf", "pki/tls/certs", "pki/ca-trust/extracted", "bash.bashrc", "profile", "profile.d",
    "environment", "inputrc", "shells", "login.defs", "mime.types", "magic", "magic.mime", "os-release",
    "debian_version", "lsb-release", "terminfo", "fonts", "vim", "perl", "mtab", "python3*",
)


# Capabilities a command keeps when agentcompass runs as root (bwrap then makes no user namespace, and
# root inside would keep all of root's: mknod of the host's disk, mount, module loading, open_by_handle_at).
# What is left is Docker's default set without mknod: a root task can still chown, bind port 80, ping.
ROOT_KEEPS = ("CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL", "CAP_SETGID", "CAP_SETUID",
              "CAP_SETPCAP", "CAP_SETFCAP", "CAP_NET_BIND_SERVICE", "CAP_NET_RAW", "CAP_SYS_CHROOT", "CAP_AUDIT_WRITE")


def capability_args() -> list[str]:
    if os.geteuid() != 0:
        return []  # bwrap's user namespace: the user's own rights, no capability on the host
    args = ["--cap-drop", "ALL"]
    for cap in ROOT_KEEPS:
        args += ["--cap-add", cap]
    return args


def is_under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


@functools.lru_cache(maxsize=1)
def system_binds() -> tuple[tuple[str, ...], ...]:
    """bwrap arguments for the system trees that exist on this host (links as links)."""
    binds = []
    for entry in SYSTEM_TREES:
        host = Path("/") / entry
        if host.is_symlink():
            binds.append(("--symlink", os.readlink(host), str(host)))
        elif host.is_dir():
            binds.append(("--ro-bind", str(host), str(host)))
    return tuple(binds)


def etc_binds(resolv_conf: str | None = None) -> tuple[tuple[str, ...], ...]:
    """bwrap arguments that build the sandbox's /etc from the allowlist: an empty tmpfs, the listed
    entries bound read-only, then read-only itself. resolv_conf: a file shown as /etc/resolv.conf
    instead of the host's."""
    own = (("--ro-bind", resolv_conf, "/etc/resolv.conf"),) if resolv_conf is not None else ()
    return (("--tmpfs", "/etc"), *allowed_etc(), *own, ("--remount-ro", "/etc"))


@functools.lru_cache(maxsize=1)
def allowed_etc() -> tuple[tuple[str, ...], ...]:
    """The allowlist's entries that exist here, as bwrap arguments: a link into /usr or /proc stays a link;
    a link elsewhere (systemd-resolved's resolv.conf under /run) is shown as the file it points to."""
    binds: list[tuple[str, ...]] = []
    for pattern in ETC_ALLOWED:
        for host in sorted(glob.glob(f"/etc/{pattern}")):
            real = os.path.realpath(host)
            if os.path.islink(host) and (is_under(real, "/usr") or is_under(real, "/proc")):
                binds.append(("--symlink", os.readlink(host), host))
            elif os.path.islink(host) and is_under(real, "/etc"):
                continue  # a link to another /etc file: shown only when that file is listed itself
            elif os.path.exists(real):
                binds.append(("--ro-bind", real, host))
    return tuple(binds)


@functools.lru_cache(maxsize=1)
def python_environment() -> tuple[str, ...]:
    """Where the running interpreter and its packages live (a venv and the install it was made
    from): commands a user points at this Python must find it inside the sandbox. Never "/" nor a
    folder that holds the user's home: those would show everything the allowlist keeps out."""
    places = {sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix,
              str(Path(os.path.realpath(sys.executable)).parents[1])}
    homes = {os.path.realpath(os.path.expanduser("~")), "/root", "/home"}
    paths = {os.path.abspath(p) for p in places} | {os.path.realpath(p) for p in places}
    return tuple(sorted(p for p in paths if p != "/" and not any(is_under(home, p) for home in homes)))


@functools.lru_cache(maxsize=1)
def package_folder() -> str:
    """agentcompass's own folder (its recipes, demo tasks and their solutions): hidden when a bound
    Python environment holds it (an install that is not editable)."""
    return os.path.realpath(str(Path(__file__).resolve().parents[2]))


def python_binds() -> list[tuple[str, ...]]:
    """The Python environment, read-only at its own paths, with agentcompass's own data left out."""
    binds: list[tuple[str, ...]] = []
    shown = [path for path in python_environment() if not any(is_under(path, f"/{tree}") for tree in SYSTEM_TREES)]
    for path in shown:
        binds.append(("--ro-bind", path, path))
    visible = [*shown, *(f"/{tree}" for tree in SYSTEM_TREES)]
    package = package_folder()
    if any(is_under(package, place) for place in visible):
        binds.append(("--tmpfs", package))
    return binds


def visible_from_host(path: str) -> bool:
    """Whether a host path lies in what the allowlist shows (so a `hide` entry needs covering)."""
    trees = [f"/{tree}" for tree in SYSTEM_TREES] + ["/etc"] + list(python_environment())
    return any(is_under(path, tree) or is_under(os.path.realpath(path), tree) for tree in trees)
