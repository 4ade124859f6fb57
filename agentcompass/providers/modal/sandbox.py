"""One Modal sandbox, as the trial sees it: commands through `Sandbox.exec` (an over-long one sent as a
script file), files as tar archives through an exec's stdin and stdout, close as terminate. The provider
that creates it is in provider.py; the `modal` SDK is imported inside the methods that use it."""

from __future__ import annotations

import io
import math
import tarfile
import tempfile
import threading
import time
import uuid
from pathlib import Path, PurePosixPath
from typing import IO, TYPE_CHECKING, Any

from agentcompass.core.errors import InfraError
from agentcompass.core.sandbox import ExecResult, SandboxSpec, cap_output
from agentcompass.providers.modal.settings import MAX_LIFETIME_S, ModalSettings
from agentcompass.providers.remote import (
    DOWNLOAD_SCRIPT, DRAIN_AFTER_KILL_S, EXEC_MARK, KILL_MARKED, MISSING_EXIT, RemoteSandbox, extract_renamed, one_line,
    upload_archive,
)

if TYPE_CHECKING:
    import modal

UPLOAD_CHUNK = 1024 * 1024
MAX_INLINE_COMMAND = 60 * 1024  # Modal refuses an exec whose arguments pass 64 KiB (ARG_MAX_BYTES in the SDK)
TRANSFER_TIMEOUT_S = 1800  # a tar upload or download: Modal ends it past this


class ModalSandbox(RemoteSandbox):
    def __init__(self, sandbox: "modal.Sandbox", spec: SandboxSpec, settings: ModalSettings,
                 has_task_image: bool = True) -> None:
        super().__init__(spec, settings, has_task_image)
        self.sandbox = sandbox
        self.id = sandbox.object_id

    def attach_hint(self) -> str:
        return (f"modal shell {self.id}   (it ends by itself after its timeout; end it now with: "
                f"agentcompass cleanup --env modal)")

    def wait_ready(self, timeout: float) -> None:
        """The first command: Modal returns from create before the sandbox is scheduled, and exec waits for
        it. The caller bounds this wait (ModalProvider._scheduled); it never counts as a command's time."""
        self._wait(self._start("true", timeout=math.ceil(timeout)))

    # -- exec ----------------------------------------------------------------------------
    def exec(
        self, cmd: str, *, cwd: str | None = None, env: dict[str, str] | None = None, timeout: float | None = None,
        user: str | None = None,
    ) -> ExecResult:
        mark = uuid.uuid4().hex
        start = time.monotonic()
        if len(cmd.encode()) > MAX_INLINE_COMMAND:  # Modal refuses an argv over 64 KiB: send it as a file
            script = f"/tmp/agentcompass-cmd-{mark}.sh"
            self._upload_bytes(cmd.encode(), script)
            argv: tuple[str, ...] = (self.settings.shell, script)
        else:
            argv = (self.settings.shell, "-c", cmd)
        # Modal kills the command at its exec timeout; the kill below also catches what it forked.
        process = self._start(*argv, workdir=cwd or self.spec.workdir or None, env={**(env or {}), EXEC_MARK: mark},
                              timeout=math.ceil(timeout) if timeout else MAX_LIFETIME_S)
        keep = self.settings.output_cap_bytes + 1  # one byte more than the cap, so cap_output marks the cut
        stdout, stderr = bytearray(), bytearray()
        errors: list[Exception] = []
        readers = [threading.Thread(target=read_capped, args=(stream, buffer, keep, errors), daemon=True)
                   for stream, buffer in ((process.stdout, stdout), (process.stderr, stderr))]
        for reader in readers:
            reader.start()
        deadline = start + timeout if timeout else None
        for reader in readers:
            reader.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        timed_out = any(reader.is_alive() for reader in readers)
        if timed_out:
            self._kill_marked(mark)
            for reader in readers:
                reader.join(DRAIN_AFTER_KILL_S)
            code = 124
        else:
            code = self._wait(process)
            self._check_exit(code, broken=bool(errors))  # a sandbox that died under the command: not its verdict
            if errors:  # the stream broke in a live sandbox: the output is incomplete, so there is no result
                raise InfraError(f"output of a command in Modal sandbox {self.id} broke off: {one_line(errors[0])[:300]}")
            # Modal's own exec timeout ended it first: wait() reports -1 for that.
            if timeout and code == -1:
                timed_out, code = True, 124
                self._kill_marked(mark)
        cap = self.settings.output_cap_bytes
        return ExecResult(code, cap_output(bytes(stdout), cap), cap_output(bytes(stderr), cap), timed_out,
                          time.monotonic() - start)

    def _start(self, *args: str, **kwargs: Any) -> Any:
        import modal

        if self._closed:
            raise InfraError("sandbox is closed")
        try:
            return self.sandbox.exec(*args, text=False, **kwargs)
        except modal.exception.Error as exc:
            raise self._failure(f"exec in Modal sandbox {self.id} failed", exc) from exc

    def _wait(self, process: Any) -> int:
        import modal

        try:
            return int(process.wait())
        except modal.exception.Error as exc:
            raise self._failure(f"exec in Modal sandbox {self.id} vanished", exc) from exc

    def _lost(self) -> str | None:
        """None while the sandbox runs; else how it ended (terminated, past its timeout, gone)."""
        import modal

        try:
            code = self.sandbox.poll()
        except (modal.exception.NotFoundError, modal.exception.SandboxTerminatedError):
            return f"Modal sandbox {self.id} no longer exists"
        except modal.exception.Error:
            return None  # Modal is hard to reach, which says nothing about the sandbox: an ordinary infra error
        return None if code is None else f"Modal sandbox {self.id} has ended (exit code {code})"

    def _kill_marked(self, mark: str) -> None:
        import modal

        try:
            killer = self.sandbox.exec("/bin/sh", "-c", KILL_MARKED, f"{EXEC_MARK}={mark}", text=False, timeout=60)
            killer.wait()
        except modal.exception.Error:
            pass  # the sandbox is gone: so is the command

    # -- files ---------------------------------------------------------------------------
    def upload(self, local: Path, remote: str) -> None:
        """Copy a file or a directory's contents to `remote`, creating parent directories."""
        with tempfile.SpooledTemporaryFile(max_size=16 * 1024 * 1024) as spool:
            upload_archive(local, remote, spool)
            self._send_archive(spool, f"upload of {local} to {remote}")

    def _upload_bytes(self, data: bytes, remote: str) -> None:
        with tempfile.SpooledTemporaryFile(max_size=16 * 1024 * 1024) as spool:
            with tarfile.open(fileobj=spool, mode="w") as archive:
                info = tarfile.TarInfo(remote.lstrip("/"))
                info.size, info.mode = len(data), 0o644
                archive.addfile(info, io.BytesIO(data))
            spool.seek(0)
            self._send_archive(spool, f"upload of a command to {remote}")

    def _send_archive(self, spool: IO[bytes], what: str) -> None:
        import modal

        process = self._start("tar", "-xf", "-", "-C", "/", timeout=TRANSFER_TIMEOUT_S)
        try:
            while chunk := spool.read(UPLOAD_CHUNK):
                process.stdin.write(chunk)
                process.stdin.drain()
            process.stdin.write_eof()
            process.stdin.drain()
        except modal.exception.Error as exc:
            raise self._failure(f"{what} failed", exc) from exc
        error = bytearray()
        read_capped(process.stderr, error, 4096, [])
        code = self._wait(process)
        if code != 0:
            self._raise_if_lost()
            raise InfraError(f"{what} failed (tar exit {code}): {one_line(error.decode(errors='replace'))[:300]}")

    def download(self, remote: str, local: Path) -> list[str]:
        """Copy `remote` (a file, or a directory's contents) to `local`; FileNotFoundError when it is missing."""
        import modal

        process = self._start(self.settings.shell, "-c", DOWNLOAD_SCRIPT, "download", str(PurePosixPath(remote)),
                              timeout=TRANSFER_TIMEOUT_S)
        with tempfile.SpooledTemporaryFile(max_size=16 * 1024 * 1024) as spool:
            try:
                for chunk in process.stdout:
                    spool.write(chunk)
            except modal.exception.Error as exc:
                raise self._failure(f"download of {remote} failed", exc) from exc
            code = self._wait(process)
            if code == MISSING_EXIT:
                raise FileNotFoundError(remote)
            if code != 0:
                self._raise_if_lost()
                error = bytearray()
                read_capped(process.stderr, error, 4096, [])
                raise InfraError(f"download of {remote} failed (tar exit {code}): {one_line(error.decode(errors='replace'))[:300]}")
            spool.seek(0)
            with tarfile.open(fileobj=spool, mode="r") as archive:
                return extract_renamed(archive, local, remote)  # tar archives links as links: none followed

    def close(self) -> None:
        """Terminate the sandbox; nothing else. Safe to call twice, from any thread."""
        import modal

        if not self._close_once():
            return
        try:
            self.sandbox.terminate()
        except modal.exception.NotFoundError:
            pass
        except modal.exception.Error as exc:  # its hard lifetime ends it anyway: not worth a finished trial
            import structlog

            structlog.get_logger("agentcompass").warning("cannot terminate a Modal sandbox; it ends at its timeout", sandbox=self.id,
                        error=one_line(exc)[:300])
        finally:
            try:
                self.sandbox.detach()  # frees the client's connection to it
            except Exception:  # detaching is local bookkeeping: never worth failing a trial for
                pass


def read_capped(stream: Any, buffer: bytearray, keep: int, errors: list[Exception]) -> None:
    """Read a stream to its end, keeping at most `keep` bytes (the rest is read and dropped); a stream
    that breaks off appends its error to `errors`, so no one mistakes what arrived for the whole output."""
    try:
        for chunk in stream:
            if isinstance(chunk, str):
                chunk = chunk.encode()
            if len(buffer) < keep:
                buffer += chunk[: keep - len(buffer)]
    except Exception as exc:  # the sandbox or the connection went away mid-stream
        errors.append(exc)
