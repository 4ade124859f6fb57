"""What the podman test modules share: podman's API service started here on a socket of our own (rootful as
root; rootless as an unprivileged user made for it, with subordinate ids), the local base image loaded into
it from docker (podman cannot pull here either), and lookups by label through the podman CLI."""

from __future__ import annotations

import json
import os
import pwd
import resource
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import skip_or_fail
from shared_cache import exclusive

BASE_IMAGE = "agentcompass/base:bookworm"
ROOTLESS_USER = "agentcompass-podman"  # made by the rootless fixture, kept between runs (its storage holds the base)
ROOTLESS_IDS = "300000:65536"  # its subordinate uids and gids


@dataclass
class Service:
    url: str  # unix:///... for --env-params host / CONTAINER_HOST
    podman: list[str]  # the CLI that sees the same storage (for assertions)

    def ids(self, label: str, kind: str = "ps") -> list[str]:
        args = ["ps", "-aq"] if kind == "ps" else ["network", "ls", "-q"]
        out = subprocess.run([*self.podman, *args, "--filter", f"label={label}"], capture_output=True, text=True)
        return out.stdout.split()

    def inspect(self, name: str) -> dict:
        out = subprocess.run([*self.podman, "inspect", name], capture_output=True, text=True, check=True)
        return json.loads(out.stdout)[0]


def limits_conf(path: Path) -> Path:
    """containers.conf pinning the containers' open-file and process limits to what this process has: podman
    raises both to its own defaults, which a host that forbids raising them (this CI's VM) refuses at start."""
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)
    nproc = min(resource.getrlimit(resource.RLIMIT_NPROC)[1], 32768)  # podman lowers its own to 32768
    path.write_text(f'[containers]\ndefault_ulimits = ["nofile={nofile[0]}:{nofile[1]}", "nproc={nproc}:{nproc}"]\n')
    path.chmod(0o644)
    return path


def start(argv: list[str], socket: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([*argv, "system", "service", "--time=0", f"unix://{socket}"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 30
    while not socket.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            skip_or_fail(f"podman's API service did not start on {socket}")
        time.sleep(0.1)
    return proc


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()


def load_base(podman: list[str], env: dict[str, str]) -> None:
    """The base image in podman's storage, from docker's (once per storage: kept between runs)."""
    if subprocess.run([*podman, "image", "exists", BASE_IMAGE], env=env).returncode == 0:
        return
    with tempfile.TemporaryDirectory(prefix="agentcompass-podman-") as scratch:
        archive = Path(scratch) / "base.tar"
        subprocess.run(["docker", "save", "-o", str(archive), BASE_IMAGE], check=True)
        os.chmod(scratch, 0o755)
        archive.chmod(0o644)
        loaded = subprocess.run([*podman, "load", "-i", str(archive)], env=env, capture_output=True, text=True)
        if loaded.returncode != 0:
            skip_or_fail(f"podman load of {BASE_IMAGE} failed: {loaded.stderr[-300:]}")


@pytest.fixture(scope="session")
def podman_rootful(base_image: str, tmp_path_factory) -> Iterator[Service]:
    if shutil.which("podman") is None:
        skip_or_fail("podman is not installed (apt-get install podman)")
    if os.geteuid() != 0:
        pytest.skip("rootful podman needs root")
    home = tmp_path_factory.mktemp("podman-root")
    env = {**os.environ, "CONTAINERS_CONF": str(limits_conf(home / "containers.conf"))}
    with exclusive("podman-base"):
        load_base(["podman"], env)
    proc = start(["podman"], home / "api.sock", env)
    yield Service(f"unix://{home / 'api.sock'}", ["podman", "--url", f"unix://{home / 'api.sock'}"])
    stop(proc)


def rootless_user() -> pwd.struct_passwd:
    """The unprivileged user, made once: a home, subordinate ids, native overlay storage (the kernel's, not vfs)."""
    try:
        return pwd.getpwnam(ROOTLESS_USER)
    except KeyError:
        pass
    subprocess.run(["useradd", "--create-home", "--shell", "/bin/sh", ROOTLESS_USER], check=True)
    for ids in ("/etc/subuid", "/etc/subgid"):
        if f"{ROOTLESS_USER}:" not in Path(ids).read_text() if Path(ids).exists() else True:
            with open(ids, "a") as file:
                file.write(f"{ROOTLESS_USER}:{ROOTLESS_IDS}\n")
    return pwd.getpwnam(ROOTLESS_USER)


@pytest.fixture(scope="session")
def podman_rootless(base_image: str, tmp_path_factory) -> Iterator[Service]:
    """podman's API service run by an unprivileged user: its containers are that user's, in its user namespace."""
    if shutil.which("podman") is None:
        skip_or_fail("podman is not installed (apt-get install podman)")
    if os.geteuid() != 0:
        pytest.skip("making the rootless user needs root")
    with exclusive("podman-rootless-user"):
        user = rootless_user()
    runtime = Path(tempfile.mkdtemp(prefix="agentcompass-podman-rootless-"))
    config = Path(user.pw_dir) / ".config" / "containers"
    config.mkdir(parents=True, exist_ok=True)
    (config / "storage.conf").write_text('[storage]\ndriver = "overlay"\n')
    limits_conf(config / "containers.conf")
    for path in (runtime, config.parent, config, config / "storage.conf", config / "containers.conf"):
        os.chown(path, user.pw_uid, user.pw_gid)
    runtime.chmod(0o700)
    env = {"PATH": os.environ["PATH"], "HOME": user.pw_dir, "USER": ROOTLESS_USER, "XDG_RUNTIME_DIR": str(runtime)}
    as_user = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups", "podman"]
    with exclusive("podman-rootless-base"):
        load_base(as_user, env)
    proc = start(as_user, runtime / "api.sock", env)
    yield Service(f"unix://{runtime / 'api.sock'}", ["podman", "--url", f"unix://{runtime / 'api.sock'}"])
    stop(proc)
    shutil.rmtree(runtime, ignore_errors=True)
