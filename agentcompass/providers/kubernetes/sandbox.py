"""One trial's pod, as the trial sees it: commands and files over the API's exec stream (stream.py), close as
the pod's deletion. The provider that creates it is in provider.py."""

from __future__ import annotations

import shlex
import tarfile
import tempfile
import time
import uuid
from pathlib import Path, PurePosixPath
from collections.abc import Callable
from typing import TYPE_CHECKING

from agentcompass.core.errors import InfraError
from agentcompass.core.sandbox import ExecResult, SandboxSpec, cap_output
from agentcompass.providers.kubernetes.pod import TRIAL_CONTAINER
from agentcompass.providers.kubernetes.settings import KubernetesSettings
from agentcompass.providers.kubernetes.stream import RUNNER, ExecStream, StreamBroken, exit_code, script, status_message
from agentcompass.providers.remote import (
    DOWNLOAD_SCRIPT, EXEC_MARK, KILL_MARKED, MISSING_EXIT, RemoteSandbox, extract_renamed, one_line, upload_archive,
)

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

TRANSFER_TIMEOUT_S = 1800.0


class KubernetesSandbox(RemoteSandbox):
    def __init__(self, api: "ApiClient", name: str, spec: SandboxSpec, settings: KubernetesSettings,
                 has_task_image: bool = True) -> None:
        super().__init__(spec, settings, has_task_image)
        self.api = api
        self.id = name
        self.namespace = settings.namespace
        self.settings: KubernetesSettings = settings

    def attach_hint(self) -> str:
        return (f"kubectl exec -it -n {self.namespace} {self.id} -c {TRIAL_CONTAINER} -- bash   (end it with: "
                "agentcompass cleanup --env kubernetes)")

    # -- exec ----------------------------------------------------------------------------
    def _open(self, argv: list[str]) -> ExecStream:
        from kubernetes.client.exceptions import ApiException

        if self._closed:
            raise InfraError("sandbox is closed")
        try:
            return ExecStream(self.api.configuration, self.namespace, self.id, TRIAL_CONTAINER, argv)
        except (ApiException, OSError) as exc:
            raise self._failure(f"exec in pod {self.id} failed", exc) from exc
        except Exception as exc:  # the websocket handshake's own errors (a refused upgrade)
            raise self._failure(f"exec in pod {self.id} failed", exc) from exc

    def _run(self, body: bytes, payload: bytes = b"", *, timeout: float | None, keep: int,
             sink: "Callable[[bytes], object] | None" = None, mark: str = "") -> tuple[int | None, bytes, bytes, bytes, bool]:
        """Send `body` (the script) and `payload` on stdin, then read until the command ends."""
        stream = self._open([*RUNNER, str(len(body))])
        start = time.monotonic()
        try:
            stream.send(body + payload)
            out, err, status, timed_out = stream.collect(
                keep, start + timeout if timeout else None, lambda: self._kill_marked(mark) if mark else None, sink)
        except StreamBroken as exc:
            self._raise_if_lost()
            raise InfraError(f"the exec stream of pod {self.id} broke off: {one_line(exc)[:300]}") from exc
        except OSError as exc:
            raise self._failure(f"exec in pod {self.id} failed", exc) from exc
        return (None if timed_out else exit_code(status)), out, err, status, timed_out

    def exec(self, cmd: str, *, cwd: str | None = None, env: dict[str, str] | None = None,
             timeout: float | None = None, user: str | None = None) -> ExecResult:
        mark = uuid.uuid4().hex
        start = time.monotonic()
        body = script(cmd, shell=self.settings.shell, cwd=cwd or self.spec.workdir or None, env=env or {}, mark=mark)
        keep = self.settings.output_cap_bytes + 1  # one byte more than the cap, so cap_output marks the cut
        code, out, err, status, timed_out = self._run(body.encode(), timeout=timeout, keep=keep, mark=mark)
        if timed_out:
            code = 124
        elif code is None:  # no exit code: the command could not start, or the container is gone
            self._raise_if_lost(1.0)
            raise InfraError(f"exec in pod {self.id} failed: {status_message(status)}")
        else:
            self._check_exit(code)
        cap = self.settings.output_cap_bytes
        return ExecResult(code, cap_output(out, cap), cap_output(err, cap), timed_out, time.monotonic() - start)

    def _kill_marked(self, mark: str) -> None:
        body = f"exec /bin/sh -c {shlex.quote(KILL_MARKED)} {shlex.quote(f'{EXEC_MARK}={mark}')}\n".encode()
        try:
            self._run(body, timeout=60, keep=4096)
        except InfraError:
            pass  # the pod is gone: so is the command

    def _lost(self) -> str | None:
        """None while the pod runs; else how it ended (deleted, evicted, past its deadline, its container dead)."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        try:
            pod = client.CoreV1Api(self.api).read_namespaced_pod(self.id, self.namespace,
                                                                 _request_timeout=self.settings.api_timeout)
        except ApiException as exc:
            return f"pod {self.id} no longer exists" if exc.status == 404 else None
        except Exception:  # the API is hard to reach, which says nothing about the pod
            return None
        return pod_ended(pod)

    # -- files ---------------------------------------------------------------------------
    def upload(self, local: Path, remote: str) -> None:
        """Copy a file or a directory's contents to `remote`, creating parent directories."""
        with tempfile.SpooledTemporaryFile(max_size=16 * 1024 * 1024) as spool:
            upload_archive(local, remote, spool)
            self._send_archive(spool.read(), f"upload of {local} to {remote}")

    def _send_archive(self, archive: bytes, what: str) -> None:
        # The archive follows the script on stdin; `head -c` hands tar exactly its bytes and then an end.
        body = f"head -c {len(archive)} | tar -xf - -C /\n".encode()
        code, _, err, status, _ = self._run(body, archive, timeout=TRANSFER_TIMEOUT_S, keep=4096)
        if code != 0:
            self._raise_if_lost()
            raise InfraError(f"{what} failed (tar exit {code}): {one_line(err.decode(errors='replace') or status_message(status))[:300]}")

    def download(self, remote: str, local: Path) -> list[str]:
        """Copy `remote` (a file, or a directory's contents) to `local`; FileNotFoundError when it is missing."""
        body = f"set -- {shlex.quote(str(PurePosixPath(remote)))}\n{DOWNLOAD_SCRIPT}\n".encode()
        with tempfile.SpooledTemporaryFile(max_size=16 * 1024 * 1024) as spool:
            code, _, err, status, _ = self._run(body, timeout=TRANSFER_TIMEOUT_S, keep=4096, sink=spool.write)
            if code == MISSING_EXIT:
                raise FileNotFoundError(remote)
            if code != 0:
                self._raise_if_lost()
                raise InfraError(f"download of {remote} failed (tar exit {code}): "
                                 f"{one_line(err.decode(errors='replace') or status_message(status))[:300]}")
            spool.seek(0)
            with tarfile.open(fileobj=spool, mode="r") as archive:
                return extract_renamed(archive, local, remote)  # tar archives links as links: none followed

    def close(self) -> None:
        """Delete the pod (at once: its keep-alive ends on TERM); nothing else. Safe to call twice."""
        if not self._close_once():
            return
        delete_pod(self.api, self.namespace, self.id, self.settings.api_timeout)


def pod_ended(pod: object) -> str | None:
    """How a pod's trial container ended, or None while it runs."""
    status = getattr(pod, "status", None)
    phase = getattr(status, "phase", None)
    if getattr(getattr(pod, "metadata", None), "deletion_timestamp", None):
        return f"pod {pod.metadata.name} is being deleted"  # type: ignore[attr-defined]
    if phase in ("Succeeded", "Failed"):
        return f"pod {pod.metadata.name} has ended ({phase}{': ' + status.reason if status.reason else ''})"  # type: ignore[attr-defined]
    for container in getattr(status, "container_statuses", None) or []:
        if container.name == TRIAL_CONTAINER and container.state and container.state.terminated:
            ended = container.state.terminated
            return f"the trial container of pod {pod.metadata.name} has ended ({ended.reason or 'exit ' + str(ended.exit_code)})"  # type: ignore[attr-defined]
    return None


def delete_pod(api: "ApiClient", namespace: str, name: str, timeout: float) -> None:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        client.CoreV1Api(api).delete_namespaced_pod(name, namespace, grace_period_seconds=0,
                                                    _request_timeout=timeout)
    except ApiException as exc:
        if exc.status != 404:
            import structlog

            structlog.get_logger("agentcompass").warning(
                "cannot delete a pod; it ends at its activeDeadlineSeconds, or: agentcompass cleanup --env kubernetes",
                pod=name, error=f"{exc.status} {one_line(exc.reason)[:200]}")
    except Exception as exc:  # the API is unreachable: its deadline ends it anyway
        import structlog

        structlog.get_logger("agentcompass").warning("cannot delete a pod", pod=name, error=one_line(exc)[:300])
