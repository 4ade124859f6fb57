"""One command in a pod over the API's exec stream (the websocket of pods/exec, channel.k8s.io framing: a
message's first byte names its channel, 0 stdin, 1 stdout, 2 stderr, 3 the command's status).

The exec API takes neither a working directory, nor an environment, nor a way to end stdin that every cluster
knows (v4 has none), so every command is a small shell script sent on stdin, read to a length given in the
argv (`head -c N`): `cd`, `export`s, then the command with stdin from /dev/null. Nothing of it (variables that may
hold an agent's API key, a command of any length) lands in the request's URL, the API server's audit log or
the pod's process list; uploads send their archive the same way."""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agentcompass.providers.remote import EXEC_MARK

if TYPE_CHECKING:
    from kubernetes.client import Configuration

STDIN, STDOUT, STDERR, ERROR = 0, 1, 2, 3
READ_SLICE_S = 0.5  # how long one wait for output lasts, so a deadline is seen in time
# Read exactly N bytes of stdin (the script) and run it; the stream's stdin is never closed on v4.
RUNNER = ['/bin/sh', '-c', 'eval "$(head -c "$0")"']
SEND_CHUNK = 256 * 1024


class Discard:
    def write(self, _data: bytes) -> None:
        pass


class StreamBroken(Exception):
    """The exec stream ended without the command's status: the pod or the connection went away."""


MAX_INLINE_COMMAND = 100 * 1024  # Linux caps one argument at 128 KiB (MAX_ARG_STRLEN): longer ones run from a file


def script(cmd: str, *, shell: str, cwd: str | None, env: dict[str, str], mark: str) -> str:
    lines = [f"export {EXEC_MARK}={shlex.quote(mark)}"]
    lines += [f"export {name}={shlex.quote(value)}" for name, value in env.items()]
    if cwd:
        lines.append(f'cd -- {shlex.quote(cwd)} || exit 1')
    if len(cmd.encode()) <= MAX_INLINE_COMMAND:
        lines.append(f"exec {shlex.quote(shell)} -c {shlex.quote(cmd)} </dev/null")
    else:  # as a script file (as modal sends one), removed once it ran
        end = f"AGENTCOMPASS_END_{mark}"
        lines += ['f=$(mktemp /tmp/agentcompass-cmd-XXXXXX)', f"cat > \"$f\" <<'{end}'", cmd, end,
                  f'{shlex.quote(shell)} "$f" </dev/null; s=$?; rm -f "$f"; exit $s']
    return "\n".join(lines) + "\n"


def exit_code(status: bytes) -> int | None:
    """The command's exit code from the status channel: Success is 0; NonZeroExitCode carries it as a cause;
    None for any other failure (the command could not start, the container is gone)."""
    try:
        data = json.loads(status.decode("utf-8", errors="replace") or "{}")
    except json.JSONDecodeError:
        return None
    if data.get("status") == "Success":
        return 0
    for cause in (data.get("details") or {}).get("causes") or []:
        if cause.get("reason") == "ExitCode" and str(cause.get("message", "")).lstrip("-").isdigit():
            return int(cause["message"])
    return None


def status_message(status: bytes) -> str:
    try:
        return str(json.loads(status.decode("utf-8", errors="replace")).get("message", ""))[:300]
    except (json.JSONDecodeError, AttributeError):
        return status.decode("utf-8", errors="replace")[:300]


class ExecStream:
    """An open exec stream: send the script (and any payload), then read stdout and stderr to a cap until the
    command's status arrives, the deadline passes or the stream breaks."""

    def __init__(self, configuration: "Configuration", namespace: str, pod: str, container: str, argv: list[str]) -> None:
        from kubernetes import client
        from kubernetes.stream import stream

        # A client of its own: `stream` swaps the ApiClient's call_api while it connects, which would send another
        # thread's ordinary call on a shared client down a websocket.
        core = client.CoreV1Api(client.ApiClient(configuration))
        self.ws = stream(core.connect_get_namespaced_pod_exec, pod, namespace, container=container, command=argv,
                         stdin=True, stdout=True, stderr=True, tty=False, _preload_content=False, binary=True)
        # The client also copies all output into one buffer for read_all(), which `stream` gives no way to turn
        # off; unread, it would hold a whole download or an agent's endless output in memory a second time.
        self.ws._all = Discard()

    def send(self, data: bytes) -> None:
        for start in range(0, len(data), SEND_CHUNK):
            self.ws.write_stdin(data[start:start + SEND_CHUNK])

    def collect(self, keep: int, deadline: float | None, on_deadline: Callable[[], None],
                sink: Callable[[bytes], None] | None = None) -> tuple[bytes, bytes, bytes, bool]:
        """(stdout, stderr, status, timed_out). stdout goes to `sink` whole when one is given (a download);
        else at most `keep` bytes of each stream are kept. StreamBroken when no status came."""
        out, err, status = bytearray(), bytearray(), bytearray()
        timed_out = False
        ws: Any = self.ws
        try:
            while ws.is_open():
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    if timed_out:
                        break  # killed, yet the stream stays open: stop waiting
                    timed_out = True
                    on_deadline()
                    deadline = time.monotonic() + 5.0
                    continue
                ws.update(timeout=READ_SLICE_S if deadline is None else max(0.0, min(READ_SLICE_S, deadline - now)))
                for channel, buffer in ((STDOUT, out), (STDERR, err), (ERROR, status)):
                    data = ws.read_channel(channel)
                    if not data:
                        continue
                    if channel == STDOUT and sink is not None:
                        sink(data)
                    elif channel == ERROR or len(buffer) < keep:
                        buffer += data if channel == ERROR else data[: keep - len(buffer)]
            for channel, buffer in ((STDOUT, out), (STDERR, err), (ERROR, status)):  # what arrived with the close
                data = ws.read_channel(channel)
                if data and channel == STDOUT and sink is not None:
                    sink(data)
                elif data and (channel == ERROR or len(buffer) < keep):
                    buffer += data if channel == ERROR else data[: keep - len(buffer)]
        except Exception as exc:  # the socket broke: websocket-client's and ssl's errors alike
            if not timed_out:
                raise StreamBroken(str(exc)) from exc
        finally:
            self.close()
        if not status and not timed_out:
            raise StreamBroken("the exec stream closed without the command's status")
        return bytes(out), bytes(err), bytes(status), timed_out

    def close(self) -> None:
        try:
            self.ws.close()
        except Exception:  # closing a broken socket: nothing left to free
            pass
