"""A docker exec's output as docker-py hands it over: the engine may send the first frames in the same write
as its 101 headers, where the HTTP client's buffered reader takes them in (docker/docker-py#3332). A command
that writes and ends at once then lost all it wrote (seen under load: 5 of 450 execs on Debian's docker.io,
and a failed `git apply` graded with no message). Here a unix-socket server answers exec start the way
the engine does at its fastest: headers and every frame in one write."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import docker
import pytest

from agentcompass.providers.remote import read_frames


def frame(stream: int, payload: bytes) -> bytes:
    return bytes([stream, 0, 0, 0]) + len(payload).to_bytes(4, "big") + payload


def serve_one_exec(path: Path, reply_body: bytes) -> threading.Thread:
    """Answer one POST /exec/ID/start with 101 UPGRADED, then reply_body, in one write, then hang up."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)

    def answer() -> None:
        conn, _ = server.accept()
        request = b""
        while b"\r\n\r\n" not in request:
            request += conn.recv(65536)
        head, _, body = request.partition(b"\r\n\r\n")
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
        while len(body) < length:
            body += conn.recv(65536)
        conn.sendall(b"HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.raw-stream\r\n"
                     b"Connection: Upgrade\r\nUpgrade: tcp\r\n\r\n" + reply_body)
        conn.close()
        server.close()

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("body, out, err", [
    (frame(2, b"error: calc.py: patch does not apply\n"), b"", b"error: calc.py: patch does not apply\n"),
    (frame(1, b"hello-out\n") + frame(2, b"hello-err\n") + frame(1, b"bye\n"), b"hello-out\nbye\n", b"hello-err\n"),
    # a frame cut by the end of the first write: its header and part of it came with the headers
    (frame(1, b"x" * 20000), b"x" * 20000, b""),
], ids=["one-stderr-frame", "three-frames", "a-frame-cut-by-the-write"])
def test_frames_sent_with_the_headers_are_kept(tmp_path, body, out, err):
    path = tmp_path / "engine.sock"
    server = serve_one_exec(path, body)
    api = docker.APIClient(base_url=f"unix://{path}", version="1.41")
    sock = api.exec_start("abc123", socket=True)
    stdout, stderr, timed_out, broken = read_frames(sock, None, 1 << 20, lambda: None)
    server.join(10)
    assert (stdout, stderr, timed_out, broken) == (out, err, False, False)
