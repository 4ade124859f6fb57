"""GCS on 127.0.0.1 (PyPI gcp-storage-emulator), for google-cloud-storage through its emulator setting."""

from __future__ import annotations

import contextlib
import socket
from typing import Iterator


@contextlib.contextmanager
def emulated_gcs() -> Iterator[str]:
    """A fresh in-memory emulator; yields its STORAGE_EMULATOR_HOST value."""
    from gcp_storage_emulator.server import create_server

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = create_server("127.0.0.1", port, in_memory=True)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()
