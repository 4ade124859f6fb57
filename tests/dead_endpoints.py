"""Model endpoints that fail the way real outages do: one accepts connections and never
answers (a hung server), one refuses them (nothing listens on its port)."""

from __future__ import annotations

import socket
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


@contextmanager
def silent_endpoint() -> Iterator[tuple[str, list[socket.socket]]]:
    """A base URL whose server accepts every connection and never sends a byte."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    accepted: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            accepted.append(conn)

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}/v1", accepted
    finally:
        server.close()
        for conn in accepted:
            conn.close()


def refusing_endpoint() -> str:
    """A base URL on a port nothing listens on: every connection is refused at once."""
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    return f"http://127.0.0.1:{port}/v1"


@contextmanager
def unconnectable_endpoint() -> Iterator[str]:
    """A base URL where connecting hangs, as with a firewalled host: the listener never accepts
    and its backlog is already full, so the kernel drops every new connection attempt."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    fillers = []
    for _ in range(3):
        filler = socket.socket()
        filler.setblocking(False)
        try:
            filler.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        fillers.append(filler)
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        for filler in fillers:
            filler.close()
        server.close()


def kernel_connect_timeout_s() -> float:
    """How long one connect to `unconnectable_endpoint` waits when the code sets no timeout: the kernel resends
    the SYN tcp_syn_retries times, doubling from 1 s (127 s at Linux's default of 6). A test bounded by this
    fails only when the code's own connect timeout is not applied, never because a busy machine is slow."""
    try:
        retries = int(Path("/proc/sys/net/ipv4/tcp_syn_retries").read_text())
    except (OSError, ValueError):
        retries = 6
    return float(2 ** (retries + 1) - 1)
