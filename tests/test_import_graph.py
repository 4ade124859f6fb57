"""Nothing heavy before it is needed (issue 44): each command imports only the SDKs of the path it takes.

litellm costs seconds of CPU to import, plotly and the cloud SDKs a good part of one. A refusal (an unknown
name, a rejected key, an unreachable endpoint) must come within 2 s of CPU, and `report` on a run that used no
hosted model must not pay for litellm. Each case runs the CLI as a user types it and reads, at the process's
exit, which modules it had imported: a heavy one where the command needs none fails the test, whatever the
machine's speed (no timing here; benchmarks/refusals.py prints the times)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from dead_endpoints import refusing_endpoint
from fake_llm_server import FakeLLM, FakeLLMServer

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
                          timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    return done, set(json.loads(out.read_text()))


def heavy(modules: set[str], allowed: tuple[str, ...] = ()) -> list[str]:
    """The heavy packages among `modules`, less those allowed. `google.cloud` counts once one of its SDKs is in: the
    namespace packages alone are what looking for an SDK without importing it (importlib.util.find_spec) leaves."""
    def used(name: str) -> bool:
        return any(m.startswith(name + ".") or (m == name and "." not in name) for m in modules)

    return sorted(h for h in HEAVY if h not in allowed and used(h))


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
    llm = FakeLLM([], api_key="the-right-key")  # any other key gets a 401, as a local server's would
    with FakeLLMServer(llm) as server:
        done, modules = imported(tmp_path, "run", "demo", "mini_swe_agent", "openai/local-model", "--model-base-url",
                                 server.base_url, "--model-api-key", "sk-wrong")
    assert done.returncode == 2 and "rejected the API key" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert heavy(modules) == []
    assert not (tmp_path / "results").exists()


def test_an_unreachable_endpoint_in_a_pooled_sweep_is_refused_without_the_model_client(tmp_path):
    done, modules = imported(tmp_path, "run", "demo", "mini_swe_agent", "openai/local-model", "--model-base-url",
                             refusing_endpoint(), "-m", "run.k=1,2", "--sweep-parallel")
    assert done.returncode == 2 and "cannot reach the model endpoint" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert heavy(modules) == []


class Terminal(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def test_a_long_wait_says_what_it_waits_for_where_a_person_watches():
    """Past its threshold a wait prints one line naming what it waits for, on a terminal only: a script reading
    stderr still gets a refusal as its one line."""
    from agentcompass.core.progress import Waiting

    watched, piped = Terminal(tty=True), Terminal(tty=False)
    with Waiting("the endpoint to answer", after_s=0.0, stream=watched) as waiting:
        waiting.timer.join(30)  # the notice is due at once: wait for it, not for a time
    with Waiting("the endpoint to answer", after_s=0.0, stream=piped) as waiting:
        assert not waiting.timer.is_alive()  # never started
    assert watched.getvalue() == "waiting for the endpoint to answer...\n"
    assert piped.getvalue() == ""
