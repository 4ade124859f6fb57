"""agentcompass's ACP client on its own (no sandbox, no bundle): real JSON-RPC over stdio with the scripted ACP
agent, which calls the scripted model endpoint and runs its commands through the client's terminals."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import REPO
from fake_llm_server import FakeLLM, FakeLLMServer

CLIENT = REPO / "agentcompass" / "harnesses" / "acp_client.py"
AGENT = REPO / "tests" / "data" / "acp_agent.py"


def drive(tmp: Path, llm: FakeLLM, *flags: str, models: str = "m1,m2") -> tuple[subprocess.CompletedProcess, list]:
    (tmp / "prompt.md").write_text("Write the date into out.txt")
    with FakeLLMServer(llm) as server:
        env = {"PATH": "/usr/bin:/bin", "OPENAI_BASE_URL": f"{server.base_url}", "OPENAI_API_KEY": "sk-t",
               "ACP_TEST_MODELS": models}
        proc = subprocess.run([sys.executable, "-I", str(CLIENT), "--prompt-file", str(tmp / "prompt.md"), *flags,
                               "--", sys.executable, str(AGENT)], cwd=tmp, env=env, capture_output=True, text=True,
                              timeout=120)
    return proc, [json.loads(line) for line in proc.stdout.splitlines()]


def test_the_agents_commands_run_through_the_clients_terminal_in_the_workdir(tmp_path):
    llm = FakeLLM(["echo done > out.txt"], finish="Done.")
    proc, events = drive(tmp_path, llm, "--model", "m2")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out.txt").read_text() == "done\n"
    result = events[-1]
    assert result["stopReason"] == "end_turn" and result["model"] == {"mechanism": "session/set_model", "model": "m2"}
    assert result["authenticated"] == "openai-key"  # its env-var method, whose variable is set
    assert result["usage"]["inputTokens"] == sum(r.usage["prompt_tokens"] for r in llm.successes)


def test_permission_deny_runs_none_of_the_agents_commands(tmp_path):
    llm = FakeLLM(["echo done > out.txt"], finish="Done.")
    proc, events = drive(tmp_path, llm, "--permission", "deny")
    assert proc.returncode == 0 and not (tmp_path / "out.txt").exists()
    assert "permission denied" in json.dumps(llm.requests[-1].body)


def test_a_model_the_agent_does_not_offer_fails_the_session_before_any_call(tmp_path):
    llm = FakeLLM(["echo done > out.txt"], finish="Done.")
    proc, events = drive(tmp_path, llm, "--model", "gpt-9")
    assert proc.returncode == 1 and "does not offer model 'gpt-9'" in proc.stderr
    assert llm.requests == [] and events[-1]["error"]["code"] == -32602
