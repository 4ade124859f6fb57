"""SSH transport for sandboxes on a machine of their own (gcp): one connection per machine,
one channel per command, stdin streamed in and stdout/stderr read to a cap or into a file.

The key is per run and ephemeral: generated in memory, its public half handed to the machine
(instance metadata), its private half never written anywhere. The `paramiko` library is
imported inside the functions that use it, never when the CLI starts.
"""

from __future__ import annotations

import io
import threading
import time
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, Callable

from agentcompass.core.errors import InfraError
from agentcompass.providers.remote import DRAIN_AFTER_KILL_S, one_line

if TYPE_CHECKING:
    import paramiko

CHUNK = 256 * 1024
IDLE_POLL_S = 0.02  # how long a read loop sleeps when nothing arrived


class EphemeralKey:
    """An Ed25519 key pair that lives only in this process."""

    def __init__(self, comment: str = "agentcompass") -> None:
        import paramiko
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        private = Ed25519PrivateKey.generate()
        pem = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                    serialization.NoEncryption()).decode()
        self.pkey = paramiko.Ed25519Key.from_private_key(io.StringIO(pem))
        public = private.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        self.public_line = f"{public.decode()} {comment}"

    def __repr__(self) -> str:  # never the private half, whoever prints it
        return f"EphemeralKey({self.public_line.split()[0]})"


@dataclass
class Completed:
    exit_code: int
    stdout: bytes
    stderr: bytes
    timed_out: bool


class SshHost:
    """A connection to one machine; `run` is safe to call from several threads at once."""

    def __init__(self, host: str, port: int, user: str, key: EphemeralKey) -> None:
        self.host, self.port, self.user, self.key = host, port, user, key
        self._client: "paramiko.SSHClient | None" = None

    def connect(self, deadline: float, stop: threading.Event | None = None) -> None:
        """Connect, retrying until `deadline` while the machine boots and installs the key (or until `stop`)."""
        import paramiko

        last: Exception | None = None
        delay = 1.0
        while True:
            client = paramiko.SSHClient()
            # The machine is new, with a host key made at its first boot; its address comes from
            # the cloud API. The key seen first is kept for this connection only (nothing on disk).
            client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
            try:
                client.connect(self.host, port=self.port, username=self.user, pkey=self.key.pkey, timeout=10,
                               banner_timeout=30, auth_timeout=30, allow_agent=False, look_for_keys=False)
                transport = client.get_transport()
                if transport is not None:
                    transport.set_keepalive(30)
                self._client = client
                return
            except (paramiko.SSHException, OSError, EOFError) as exc:
                client.close()
                last = exc
            if time.monotonic() + delay > deadline:
                raise InfraError(f"no SSH to {self.user}@{self.host}:{self.port}: {one_line(last)[:200]}")
            if stop is not None and stop.wait(delay):
                raise InfraError("interrupted")
            if stop is None:
                time.sleep(delay)
            delay = min(delay * 1.5, 10.0)

    def run(self, command: str, *, stdin: IO[bytes] | None = None, stdout: IO[bytes] | None = None,
            timeout: float | None = None, keep: int = 1 << 20, on_timeout: Callable[[], None] | None = None) -> Completed:
        """Run `command` on the machine; stdout goes to the `stdout` file when given, else is kept up to `keep` bytes.

        At the timeout `on_timeout` runs (it should kill the command), then what is left is drained briefly."""
        import paramiko

        if self._client is None:
            raise InfraError(f"no SSH connection to {self.host}")
        try:
            transport = self._client.get_transport()
            if transport is None or not transport.is_active():
                raise InfraError(f"the SSH connection to {self.host} is gone")
            channel = transport.open_session(timeout=30)
            try:
                channel.exec_command(command)
                if stdin is not None:
                    while chunk := stdin.read(CHUNK):
                        channel.sendall(chunk)
                channel.shutdown_write()
                return self._collect(channel, stdout, timeout, keep, on_timeout)
            finally:
                channel.close()
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise InfraError(f"SSH to {self.host} failed: {one_line(exc)[:200]}") from exc

    @staticmethod
    def _collect(channel: Any, sink: IO[bytes] | None, timeout: float | None, keep: int,
                 on_timeout: Callable[[], None] | None) -> Completed:
        out, err = bytearray(), bytearray()
        deadline = time.monotonic() + timeout if timeout else None
        timed_out = False
        while True:
            got = False
            while channel.recv_ready():
                data = channel.recv(CHUNK)
                got = True
                if sink is not None:
                    sink.write(data)
                elif len(out) < keep:
                    out += data[: keep - len(out)]
            while channel.recv_stderr_ready():
                data = channel.recv_stderr(CHUNK)
                got = True
                if len(err) < keep:
                    err += data[: keep - len(err)]
            if not got and channel.exit_status_ready() and (channel.eof_received or channel.closed):
                if not channel.recv_ready() and not channel.recv_stderr_ready():
                    break
            if deadline is not None and time.monotonic() > deadline:
                if timed_out:
                    break  # killed, yet something still holds the stream open: stop waiting
                timed_out = True
                if on_timeout is not None:
                    on_timeout()
                deadline = time.monotonic() + DRAIN_AFTER_KILL_S
            if not got:
                time.sleep(IDLE_POLL_S)
        code = 124 if timed_out else channel.recv_exit_status()
        return Completed(code, bytes(out), bytes(err), timed_out)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
