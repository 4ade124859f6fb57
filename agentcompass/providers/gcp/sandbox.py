"""One gcp trial's sandbox: the task container on its own VM, reached over SSH. Start-up sends the build
context and waits for the container; commands are `docker exec` over SSH, files tar streams over the same
channel, phase networks `docker network connect/disconnect`; close deletes the VM. The provider that
inserts the VM is in provider.py."""

from __future__ import annotations

import json
import shlex
import tarfile
import tempfile
import threading
import time
import uuid
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

from agentcompass.core.errors import InfraError
from agentcompass.core.sandbox import ExecResult, SandboxSpec, cap_output
from agentcompass.providers.gcp.api import delete_instance
from agentcompass.providers.gcp.settings import GcpSettings
from agentcompass.providers.gcp.ssh import EphemeralKey, SshHost
from agentcompass.providers.gcp.vm import STATE_DIR
from agentcompass.providers.remote import (DOWNLOAD_SCRIPT, EXEC_MARK, KILL_MARKED, MISSING_EXIT, extract_renamed,
                                          one_line, upload_archive)


class VmOwner(Protocol):
    """What a sandbox needs of the provider that inserted its VM (GcpProvider), named here so that this
    module need not import the provider: its settings, the SSH user and the run's interrupt (and what it deleted)."""

    settings: GcpSettings
    aborting: threading.Event
    delete_requested: set[str]  # VMs whose delete the interrupt already sent

    @property
    def ssh_user(self) -> str: ...


class GcpSandbox:
    def __init__(self, provider: VmOwner, instances: Any, project: str, zone: str, name: str,
                 spec: SandboxSpec, key: EphemeralKey) -> None:
        self.provider, self.instances, self.project, self.zone = provider, instances, project, zone
        self.id = name
        self.spec = spec
        self.settings = provider.settings
        self.root = "sudo " if self.settings.sudo else ""
        self.docker = f"{self.root}docker"
        self.has_task_image = self.settings.image is None
        self.ssh: SshHost | None = None
        self._key = key
        self._closed = False
        self._close_lock = threading.Lock()

    def attach_hint(self) -> str:
        return (f"gcloud compute ssh {self.id} --zone {self.zone} --project {self.project} -- "
                f"{self.docker} exec -it {self.id} bash   (delete it with: agentcompass cleanup --env gcp)")

    def start(self) -> None:
        """Connect over SSH, send the build context when there is one, wait for the task container."""
        s = self.settings
        deadline = time.monotonic() + s.boot_timeout_s
        try:
            instance = self.instances.get(project=self.project, zone=self.zone, instance=self.id)
            interface = instance.network_interfaces[0]
            address = interface.access_configs[0].nat_i_p if s.external_ip and interface.access_configs else interface.network_i_p
            self.ssh = SshHost(address, s.ssh_port, self.provider.ssh_user, self._key)
            self.ssh.connect(deadline, self.provider.aborting)
            state = f"{STATE_DIR}/{self.id}"
            if not (s.image or self.spec.image) and self.spec.build_context:
                with tempfile.TemporaryFile() as spool:
                    with tarfile.open(fileobj=spool, mode="w") as archive:
                        archive.add(str(self.spec.build_context), arcname=".")
                    spool.seek(0)
                    self._must(f"{self.root}mkdir -p {state} && {self.root}tee {state}/context.part >/dev/null && "
                               f"{self.root}mv {state}/context.part {state}/context.tar", stdin=spool)
            # Wait in short rounds (no "done" yet: ask again), so an interrupt is noticed within seconds.
            wait = f"for i in 1 2 3 4 5; do [ -e {state}/status ] && echo done && exit $(cat {state}/status); sleep 1; done"
            while b"done" not in (done := self.ssh.run(f"{self.root}sh -c {shlex.quote(wait)}", timeout=30)).stdout:
                if self.provider.aborting.is_set():
                    raise InfraError("interrupted")
                if time.monotonic() > deadline:
                    break
            if b"done" not in done.stdout or done.exit_code != 0:
                log = self.ssh.run(f"{self.root}tail -c 2000 {state}/startup.log").stdout.decode(errors="replace")
                why = f"failed ({done.exit_code})" if b"done" in done.stdout else f"took over {s.boot_timeout_s:.0f}s"
                raise InfraError(f"VM {self.id}: the task container's start-up {why}: {one_line(log)[-400:]}")
            if "public" in self.spec.network_modes and not self.spec.allow_internet:
                self.set_network("no-network")  # started on the bridge so that a later phase can join it
        except BaseException:
            self.close()
            raise

    def _must(self, command: str, **kwargs: Any) -> Any:
        assert self.ssh is not None
        done = self.ssh.run(command, **kwargs)
        if done.exit_code != 0:
            raise InfraError(f"VM {self.id}: `{command[:80]}` failed ({done.exit_code}): "
                             f"{one_line(done.stderr.decode(errors='replace'))[:300]}")
        return done

    def _ssh(self) -> SshHost:
        if self._closed or self.ssh is None:
            raise InfraError("sandbox is closed")
        return self.ssh

    # -- exec ----------------------------------------------------------------------------
    def exec(self, cmd: str, *, cwd: str | None = None, env: dict[str, str] | None = None,
             timeout: float | None = None, user: str | None = None) -> ExecResult:
        mark = uuid.uuid4().hex
        q = shlex.quote
        variables = " ".join(f"-e {q(f'{k}={v}')}" for k, v in {**(env or {}), EXEC_MARK: mark}.items())
        as_user = f"-u {q(user)} " if user else ""
        command = (f"{self.docker} exec {as_user}-w {q(cwd or self.spec.workdir)} {variables} {self.id} "
                   f"{q(self.settings.shell)} -c {q(cmd)}")
        start = time.monotonic()
        kill = f"{self.docker} exec {self.id} /bin/sh -c {q(KILL_MARKED)} {q(f'{EXEC_MARK}={mark}')}"
        cap = self.settings.output_cap_bytes
        done = self._ssh().run(command, timeout=timeout, keep=cap + 1,
                               on_timeout=lambda: self._ssh().run(kill, timeout=60))
        return ExecResult(done.exit_code, cap_output(done.stdout, cap), cap_output(done.stderr, cap), done.timed_out,
                          time.monotonic() - start)

    def set_network(self, mode: str, allowed_hosts: tuple[str, ...] = ()) -> None:  # no allowlists here (refused)
        """A phase's network (Harbor's network_mode): the task container on the VM's bridge, or on none at all."""
        inspect = self._must(f"{self.docker} inspect -f '{{{{json .NetworkSettings.Networks}}}}' {self.id}")
        attached, wanted = "bridge" in (json.loads(inspect.stdout or b"null") or {}), mode == "public"
        if wanted != attached:
            self._must(f"{self.docker} network {'connect' if wanted else 'disconnect'} bridge {self.id}")

    # -- files ---------------------------------------------------------------------------
    def upload(self, local: Path, remote: str) -> None:
        """Copy a file or a directory's contents to `remote`, creating parent directories."""
        with tempfile.SpooledTemporaryFile(max_size=16 * 1024 * 1024) as spool:
            upload_archive(local, remote, spool)
            self._must(f"{self.docker} exec -i {self.id} tar -xf - -C /", stdin=spool)

    def download(self, remote: str, local: Path) -> list[str]:
        """Copy `remote` (a file, or a directory's contents) to `local`; FileNotFoundError when it is missing."""
        q = shlex.quote
        with tempfile.SpooledTemporaryFile(max_size=16 * 1024 * 1024) as spool:
            done = self._ssh().run(f"{self.docker} exec {self.id} /bin/sh -c {q(DOWNLOAD_SCRIPT)} download "
                                   f"{q(str(PurePosixPath(remote)))}", stdout=spool)
            if done.exit_code == MISSING_EXIT:
                raise FileNotFoundError(remote)
            if done.exit_code != 0:
                raise InfraError(f"download of {remote} failed (exit {done.exit_code}): "
                                 f"{one_line(done.stderr.decode(errors='replace'))[:300]}")
            spool.seek(0)
            with tarfile.open(fileobj=spool, mode="r") as archive:
                return extract_renamed(archive, local, remote)  # tar archives links as links: none followed

    def close(self) -> None:
        """Delete the VM and wait until it is gone. Safe to call twice, from any thread."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        if self.ssh is not None:
            self.ssh.close()
        if self.id in self.provider.delete_requested:  # the interrupt already asked GCE to delete it
            return
        delete_instance(self.instances, self.project, self.zone, self.id, self.settings.operation_timeout_s)
