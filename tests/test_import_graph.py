"""Nothing heavy before it is needed (issue 44): each command imports only the SDKs of the path it takes.

litellm costs seconds of CPU to import, plotly and the cloud SDKs a good part of one. A refusal (an unknown
name, a rejected key, an unreachable endpoint) must come within 2 s of CPU, and `report` on a run that used no
hosted model must not pay for litellm. Each case runs the CLI as a user types it and reads, at the process's
exit, which modules it had imported: a heavy one where the command needs none fails the test, whatever the
machine's speed (no timing here; benchmarks/refusals.py prints the times)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from conftest import REPO

# The SDKs behind the extras: none is needed before a command takes the path that uses it.
HEAVY = ("litellm", "openai", "anthropic", "minisweagent", "plotly", "kaleido", "modal", "google.cloud", "google.auth",
         "paramiko", "docker", "swebench", "datasets", "uvicorn", "starlette")
# Run as `python -m agentcompass ARGS`; at exit (the CLI's own, which runs the exit handlers) the names of every
# module imported go to the file named first.
PROBE = """
import atexit, json, runpy, sys
out = sys.argv[1]
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
sys.argv = ["agentcompass", *sys.argv[2:]]
runpy.run_module("agentcompass", run_name="__main__", alter_sys=True)
"""


def imported(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    out = tmp_path / f"modules-{len(list(tmp_path.glob('modules-*')))}.json"
    done = subprocess.run([sys.executable, "-c", PROBE, str(out), *args], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env={**__import__("os").environ, "PYTHONPATH": str(REPO)})
    return done, set(json.loads(out.read_text()))


def heavy(modules: set[str], allowed: tuple[str, ...] = ()) -> list[str]:
    """The heavy packages among `modules`, less those allowed. `google.cloud` counts once one of its SDKs is in: the
    namespace packages alone are what looking for an SDK without importing it (importlib.util.find_spec) leaves."""
    def used(name: str) -> bool:
        return any(m.startswith(name + ".") or (m == name and "." not in name) for m in modules)

    return sorted(h for h in HEAVY if h not in allowed and used(h))


@contextmanager
def refusing_server() -> Iterator[str]:
    """An OpenAI-compatible endpoint that answers every request 401, as a local server with another key does."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            self.rfile.read(int(self.headers.get("content-length") or 0))
            data = json.dumps({"error": {"message": "Incorrect API key provided", "code": "invalid_api_key"}}).encode()
            self.send_response(401)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/v1"
    finally:
        server.shutdown()
        server.server_close()


def closed_port() -> str:
    """A local URL where nothing listens."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


@pytest.mark.parametrize("args", [["--help"], ["list"], ["list", "envs"], ["env", "check", "local"],
                                  ["run", "demoo", "oracle", "none"]], ids=" ".join)
def test_start_up_and_unknown_names_import_nothing_heavy(tmp_path, args):
    done, modules = imported(tmp_path, *args)
    assert done.returncode in (0, 2), done.stderr
    assert heavy(modules) == []


def test_a_run_without_a_model_and_its_report_import_no_model_client(tmp_path):
    ran, modules = imported(tmp_path, "run", "demo", "oracle", "none", "--benchmark-params", '{"limit": 1}',
                            "--run-name", "small")
    assert ran.returncode == 0, ran.stderr
    assert heavy(modules) == []
    reported, modules = imported(tmp_path, "report", str(tmp_path / "results" / "small"))
    assert reported.returncode == 0, reported.stderr
    assert heavy(modules, allowed=("plotly", "kaleido")) == []  # the page's charts are this path's


def test_a_rejected_key_is_refused_without_the_model_client(tmp_path):
    with refusing_server() as url:
        done, modules = imported(tmp_path, "run", "demo", "mini_swe_agent", "openai/local-model", "--model-base-url", url,
                                 "--model-api-key", "sk-wrong")
    assert done.returncode == 2 and "rejected the API key" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert heavy(modules) == []
    assert not (tmp_path / "results").exists()


def test_an_unreachable_endpoint_in_a_pooled_sweep_is_refused_without_the_model_client(tmp_path):
    done, modules = imported(tmp_path, "run", "demo", "mini_swe_agent", "openai/local-model", "--model-base-url",
                             closed_port(), "-m", "run.k=1,2", "--sweep-parallel")
    assert done.returncode == 2 and "cannot reach the model endpoint" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert heavy(modules) == []
