"""A local (bubblewrap) task without internet runs an installed CLI through the model gateway: its network namespace
reaches the gateway's one port on its loopback and nothing else (issue 36). The scripted agent first probes another
port of the host's loopback (the scripted endpoint's own, which serves the real key's calls) and the internet; both
must be unreachable. Then it fixes the demo task through the gateway, which must pass as on docker."""

from __future__ import annotations

import json
import shutil
import uuid

import pytest

from conftest import run_cli
from fake_llm_server import FakeLLM, FakeLLMServer
from test_installed_agents import API_KEY, FIX_COMMANDS, TASK, assert_solved, cli_cache, ArgvWatch  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("bwrap") is None or shutil.which("pasta") is None,
                                                   reason="bubblewrap and pasta (passt) are installed by scripts/test.sh")]


def probe(port: int) -> str:
    """A tool command: try the host's loopback port `port` and an internet address; print what each did."""
    return ("python3 -c \"import socket\n"
            "def reach(host, port):\n"
            "    try:\n"
            "        socket.create_connection((host, port), 5).close()\n"
            "        return 'open'\n"
            "    except OSError:\n"
            "        return 'closed'\n"
            f"print('PROBE host=' + reach('127.0.0.1', {port}) + ' internet=' + reach('1.1.1.1', 443))\"")


def test_an_offline_local_task_reaches_the_gateway_and_nothing_else(tmp_path, cli_cache):  # noqa: F811
    llm = FakeLLM([], api_key=API_KEY, finish="Fixed: median() now averages the two middle values.")
    with FakeLLMServer(llm) as server, ArgvWatch(API_KEY) as watch:
        llm.commands[:] = [probe(server.port), *FIX_COMMANDS]
        proc = run_cli("run", "demo", "claude_code", "claude-sonnet-4-5", "--env", "local",
                       "--env-params", json.dumps({"isolation": "bwrap"}), "--model-base-url", f"http://127.0.0.1:{server.port}",
                       "--benchmark-params", json.dumps({"sample_ids": [TASK]}), "--no-model-check",
                       f"harness.cache_dir={cli_cache}", "--results-dir", str(tmp_path / "results"),
                       "--run-name", f"t-{uuid.uuid4().hex[:8]}", cwd=tmp_path, timeout=900,
                       env={"AGENTCOMPASS_CACHE_DIR": str(tmp_path / "cache"), "HOME": str(tmp_path),
                            "ANTHROPIC_API_KEY": API_KEY})
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = [r for r in llm.requests if "PROBE host=" in json.dumps(r.body)]
    assert said and all("PROBE host=closed internet=closed" in json.dumps(r.body) for r in said)  # the attack fails
    [directory] = [p.parent for p in (tmp_path / "results").glob("*/*/summary.json")]
    [trial] = [json.loads(line) for line in (directory / "trials.jsonl").read_text().splitlines()]
    llm.commands[:] = FIX_COMMANDS  # assert_solved counts the fix's calls (the probe was one more)
    assert_solved(trial, directory, llm, "claude_code", watch)  # the honest control passes, through the gateway
