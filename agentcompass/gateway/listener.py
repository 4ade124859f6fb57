"""One listening address of the gateway: a socket bound to it, served by uvicorn in a thread of its own.

The gateway listens only where the run's sandboxes reach it (server.Gateway adds an address when a sandbox
needs one), never on every interface unless the user asks for it: each address is one Listener.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

from agentcompass.core.errors import InfraError, UserError

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0


def bindable(address: str) -> bool:
    """Whether `address` is one of this machine's own (a socket can be bound to it)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((address, 0))
    except OSError:
        return False
    return True


class Listener:
    """A uvicorn server on one socket, started at once; `port` is the port it got."""

    def __init__(self, app: Any, host: str, port: int) -> None:
        import uvicorn

        self.host = host
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            sock.close()
            raise UserError(f"the model gateway cannot listen on {host}:{port} ({exc.strerror}); "
                            "choose another with run.gateway.host / run.gateway.port (0: any free port)") from None
        sock.listen(128)
        self.port = int(sock.getsockname()[1])
        self._socket: socket.socket | None = sock  # uvicorn serves on this very socket: closed once it has stopped
        config = uvicorn.Config(app, log_config=None, access_log=False, log_level="warning", lifespan="on",
                                timeout_graceful_shutdown=2)
        self._server: Any = uvicorn.Server(config)
        self._thread: threading.Thread | None = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name="model-gateway", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise InfraError(f"the model gateway did not start on {host}:{self.port}")
            time.sleep(0.02)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self) -> None:
        """End the server (streams in flight get two seconds). Idempotent."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(STOP_TIMEOUT_S)
            if self._thread.is_alive():
                self._server.force_exit = True
                self._thread.join(STOP_TIMEOUT_S)
        self._server = self._thread = None
        if self._socket is not None:
            self._socket.close()
            self._socket = None
