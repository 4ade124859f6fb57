"""The docker provider's sandboxes: one trial's container (DockerSandbox), and the client container of a
compose task with its services (ComposeSandbox). Every operation goes through the engine API: exec over
the API socket, files as tar archives, and a lost container told from a failed call."""

from __future__ import annotations

import io
import os
import tarfile
import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentcompass.core.errors import InfraError
from agentcompass.core.sandbox import ExecResult, SandboxSpec, cap_output
from agentcompass.providers.docker.changes import overlay_changes, storage_dirs
from agentcompass.providers.docker.compose import remove_services, volume_names
from agentcompass.providers.docker.kept import archive_listed, archive_upper, deletion_command, split_archive
from agentcompass.providers.docker.egress import Egress
from agentcompass.providers.docker.settings import DockerSettings
from agentcompass.providers.remote import (EXEC_MARK, KILL_MARKED, RemoteSandbox, extract_renamed, one_line,
                                           read_frames, upload_archive)

if TYPE_CHECKING:
    import docker

# The kernel's count of processes killed for exceeding the container's memory limit (cgroup v2, then v1).
OOM_KILLS = ("cat /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control 2>/dev/null "
             "| while read -r key value; do [ \"$key\" = oom_kill ] && echo \"$value\"; done; true")


class DockerSandbox(RemoteSandbox):
    # The engine's name for the overlay storage whose upper dir changes() walks (podman's is `overlay`); None: the
    # engine's changes API only.
    overlay_driver: str | None = "overlay2"

    def __init__(self, client: "docker.DockerClient", container_id: str, spec: SandboxSpec,
                 settings: DockerSettings, has_task_image: bool = True, egress: Egress | None = None) -> None:
        super().__init__(spec, settings, has_task_image)
        self.client = client
        self.api = client.api
        self.id = container_id
        self.egress = egress  # an allowlist task's network and proxy
        self.public_network = settings.network or "none"  # a public phase's network (the provider sets the run's)

    def attach_hint(self) -> str:
        host = f"DOCKER_HOST={os.environ['DOCKER_HOST']} " if os.environ.get("DOCKER_HOST") else ""
        return f"{host}docker exec -it {self.spec.name} bash   (remove it with: {host}docker rm -f {self.spec.name})"

    # -- exec ----------------------------------------------------------------------------
    def exec(
        self, cmd: str, *, cwd: str | None = None, env: dict[str, str] | None = None, timeout: float | None = None,
        user: str | None = None,
    ) -> ExecResult:
        return self._exec_in(self.id, self.settings.shell, cmd, cwd or self.spec.workdir, env, timeout, user)

    def _exec_in(self, container: str, shell: str, cmd: str, cwd: str | None, env: dict[str, str] | None,
                 timeout: float | None, user: str | None) -> ExecResult:
        import docker

        if self._closed:
            raise InfraError("sandbox is closed")
        mark = f"{EXEC_MARK}={uuid.uuid4().hex}"
        start = time.monotonic()
        try:
            exec_id = self.api.exec_create(
                container, [shell, "-c", cmd], workdir=cwd,
                environment={**(env or {}), EXEC_MARK: mark.partition("=")[2]}, user=user or "",
            )["Id"]
            sock = self.api.exec_start(exec_id, socket=True)
        except docker.errors.APIError as exc:
            raise self._failure(f"exec in {self.spec.name} failed", exc) from exc
        deadline = start + timeout if timeout else None
        keep = self.settings.output_cap_bytes + 1  # one byte more than the cap, so cap_output marks the cut
        stdout, stderr, timed_out, broken = read_frames(sock, deadline, keep, lambda: self._kill_marked(mark, container))
        code = 124 if timed_out else self._exit_code(exec_id)
        self._check_exit(code, broken)
        cap = self.settings.output_cap_bytes
        return ExecResult(code, cap_output(stdout, cap), cap_output(stderr, cap), timed_out, time.monotonic() - start)

    def set_network(self, mode: str, allowed_hosts: tuple[str, ...] = ()) -> None:
        """A phase's network (Harbor's network_mode): on the provider's network, or on none at all; with an
        egress proxy (an allowlist task), the phase's proxy as well."""
        import docker

        if self.egress:
            self.egress.enter(mode, allowed_hosts)
        network, wanted = self.public_network, mode == "public"
        attached = network in self.api.inspect_container(self.id)["NetworkSettings"]["Networks"]
        try:
            if wanted and not attached:
                self.api.connect_container_to_network(self.id, network)
            elif attached and not wanted:
                self.api.disconnect_container_from_network(self.id, network)
        except docker.errors.APIError as exc:
            raise self._failure(f"cannot switch {self.spec.name} to network mode {mode}", exc) from exc

    def _kill_marked(self, mark: str, container: str | None = None) -> None:
        import docker

        try:
            kill_id = self.api.exec_create(container or self.id, ["/bin/sh", "-c", KILL_MARKED, mark], user="root")["Id"]
            self.api.exec_start(kill_id)
        except docker.errors.APIError:
            pass  # the container is gone: so is the command

    def _exit_code(self, exec_id: str) -> int:
        import docker

        # The stream can end a moment before the engine records the exit code.
        for _ in range(50):
            try:
                info = self.api.exec_inspect(exec_id)
            except docker.errors.APIError as exc:
                raise self._failure(f"exec in {self.spec.name} vanished", exc) from exc
            if not info.get("Running") and info.get("ExitCode") is not None:
                return int(info["ExitCode"])
            time.sleep(0.02)
        raise self._failure(f"exec in {self.spec.name} ended its output but reports no exit code")

    # -- a lost container ------------------------------------------------------------------
    def _lost(self) -> str | None:
        """None while the container runs; else what became of it (removed, exited, OOM-killed, ...)."""
        import docker

        try:
            state = self.api.inspect_container(self.id)["State"]
        except docker.errors.NotFound:
            return f"container {self.spec.name} was removed"
        except docker.errors.APIError:
            return None  # the engine is in trouble, not necessarily the container: an ordinary infra error
        if state.get("Status") == "running":
            return None
        return (f"container {self.spec.name} is {state.get('Status')} (exit code {state.get('ExitCode')}, "
                f"OOMKilled {bool(state.get('OOMKilled'))})")

    def details(self) -> dict[str, Any]:
        """For the trial's details: the engine's OOMKilled flag and how many processes the kernel killed
        for exceeding the container's memory limit (a running container's count: the agent's own doing)."""
        state = self.api.inspect_container(self.id)["State"]
        counters = self.exec(OOM_KILLS, timeout=30).stdout.split()
        return {"oom_killed": bool(state.get("OOMKilled")), "oom_kills": sum(int(n) for n in counters if n.isdigit())}

    def changes(self) -> list[tuple[str, str]]:
        """What was added ("A"), changed ("C") or deleted ("D") in the container since its image, read on the host
        (changes.py): the container's own storage where this process can read it, else the engine's
        container-changes API (`docker diff`). A process in the container cannot hide a change from either:
        writing a file of the image copies it up into the container's own layer."""
        import docker

        try:
            dirs = storage_dirs(self.api.inspect_container(self.id), self.overlay_driver) if self.overlay_driver else None
            if dirs is not None:
                return overlay_changes(*dirs)
            listed = self.api.diff(self.id) or []
        except docker.errors.APIError as exc:
            raise self._failure(f"cannot list the changes in {self.spec.name}", exc) from exc
        kinds = {0: "C", 1: "A", 2: "D"}
        return [(kinds.get(entry.get("Kind"), "C"), entry["Path"]) for entry in listed]

    def export_changes(self, dest: Path, cap_bytes: int) -> dict[str, int]:
        """The container's changes since its image as a tar at `dest` (kept.py: deletions as whiteouts), read on
        the host; kept.OverCap when they are larger than `cap_bytes`. Returns the archive's counts."""
        import docker

        try:
            dirs = storage_dirs(self.api.inspect_container(self.id))
            if dirs is not None:
                return archive_upper(dirs[0], dest, cap_bytes)
            kinds = {0: "C", 1: "A", 2: "D"}
            listed = [(kinds.get(e.get("Kind"), "C"), e["Path"]) for e in self.api.diff(self.id) or []]
            return archive_listed(listed, lambda path: self.api.get_archive(self.id, path)[0], dest, cap_bytes)
        except docker.errors.APIError as exc:
            raise self._failure(f"cannot archive the changes in {self.spec.name}", exc) from exc

    def restore_changes(self, archive: Path) -> None:
        """Put a kept state (export_changes' archive) into this fresh container: what it deletes first (as root),
        then its files through the engine's archive API, which resolves every path inside the container."""
        import docker

        with tempfile.TemporaryFile() as spool:  # a real file: the engine's request streams it
            deletions = split_archive(archive, spool)
            if deletions:
                result = self.exec(deletion_command(deletions), cwd="/", user="root", timeout=600)
                if result.exit_code != 0:
                    raise InfraError(f"cannot apply the kept deletions in {self.spec.name}: {result.stderr[-300:]}")
            try:
                self.api.put_archive(self.id, "/", spool)
            except docker.errors.APIError as exc:
                raise self._failure(f"cannot restore the kept state into {self.spec.name}", exc) from exc

    # -- files ---------------------------------------------------------------------------
    def upload(self, local: Path, remote: str) -> None:
        """Copy a file or a directory's contents to `remote`, creating parent directories."""
        import docker

        buffer = io.BytesIO()
        upload_archive(local, remote, buffer)
        try:
            self.api.put_archive(self.id, "/", buffer.getvalue())
        except docker.errors.APIError as exc:
            raise self._failure(f"upload of {local} to {remote} failed", exc) from exc

    def download(self, remote: str, local: Path) -> list[str]:
        """Copy `remote` (a file, or a directory's contents) to `local`; FileNotFoundError when it is missing.
        Links are never followed (the engine archives them as links); what the safe extractor refused is returned."""
        return self._download(self.id, remote, local)

    def _download(self, container: str, remote: str, local: Path) -> list[str]:
        import docker

        try:
            stream, _ = self.api.get_archive(container, remote)
        except docker.errors.NotFound as exc:
            self._raise_if_lost()  # a removed container has no files either: that is not the task's verdict
            raise FileNotFoundError(remote) from exc
        except docker.errors.APIError as exc:
            raise self._failure(f"download of {remote} failed", exc) from exc
        with tempfile.SpooledTemporaryFile(max_size=16 * 1024 * 1024) as spool:
            for chunk in stream:
                spool.write(chunk)
            spool.seek(0)
            with tarfile.open(fileobj=spool, mode="r") as archive:
                return extract_renamed(archive, local, remote)

    def close(self) -> None:
        """Remove the container (and its anonymous volumes); nothing else. Safe to call twice."""
        import docker

        if not self._close_once():
            return
        try:
            self.api.remove_container(self.id, force=True, v=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            if "already in progress" not in str(exc):
                raise InfraError(f"cannot remove container {self.spec.name}: {one_line(exc.explanation or exc)}") from exc
        finally:
            if self.egress:
                self.egress.close()


class ComposeSandbox(DockerSandbox):
    """The client of a compose task: closing it also removes the trial's services, network and volumes."""

    def __init__(self, client: "docker.DockerClient", container_id: str, spec: SandboxSpec,
                 settings: DockerSettings, services: list[str], has_task_image: bool = True) -> None:
        super().__init__(client, container_id, spec, settings, has_task_image)
        self.services = services  # the other services' containers

    def download_from_service(self, service: str, remote: str, local: Path) -> list[str]:
        """download from one of the trial's other services (a sidecar's artifact)."""
        return self._download(f"{self.spec.name}-{service}", remote, local)

    def stop_client(self) -> None:
        """Stop the agent's container, keeping the services (and its files, for nothing more is read from it): a
        separate verifier's task collects its sidecars' evidence with no agent process left running, as Harbor."""
        import docker

        self.client_stopped = True
        try:
            self.api.stop(self.id, timeout=10)
        except docker.errors.APIError as exc:
            raise self._failure(f"cannot stop {self.spec.name}", exc) from exc

    def _lost(self) -> str | None:
        return None if getattr(self, "client_stopped", False) else super()._lost()

    def exec_in_service(self, service: str, cmd: str, *, timeout: float | None = None, user: str | None = None) -> ExecResult:
        """exec in one of the trial's other services (Harbor's [[verifier.collect]] in a sidecar), with `sh` (a
        sidecar's image need not have bash) in the service's own working directory, as `docker compose exec`."""
        return self._exec_in(f"{self.spec.name}-{service}", "sh", cmd, None, None, timeout, user)

    def close(self) -> None:
        try:
            super().close()
        finally:
            remove_services(self.api, self.spec.name, self.services, volume_names(self.spec))
