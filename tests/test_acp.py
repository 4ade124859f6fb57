"""The acp harness end to end: a real ACP agent (tests/data/acp_agent.py: JSON-RPC over stdio) driven by
agentcompass's client on the bundled CPython, in real sandboxes, against the scripted model endpoint."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from conftest import REPO, run_cli
from fake_llm_server import FakeLLM, FakeLLMServer
from shared_cache import cache_dir
from test_installed_agents import (API_KEY, BRIDGE_HOST, FIX_COMMANDS, TASK, ArgvWatch, base_url, files_containing,
                                   online_demo, token_price)

pytestmark = pytest.mark.slow  # one bare-interpreter bundle per machine (seconds), real sandboxes

AGENT = REPO / "tests" / "data" / "acp_agent.py"
PRESET = "gpt-5"
MODELS = "gpt-4o,gpt-5"  # what the test agent offers: the client must choose the preset's with session/set_model


@pytest.fixture(scope="module")
def bundles() -> Path:
    return cache_dir("cli-agents")


def hydra_dict(values: dict[str, str]) -> str:
    return "{" + ",".join(f"{key}:'{value}'" for key, value in values.items()) + "}"


def run_acp(tmp: Path, cache: Path, llm: FakeLLM, *args: str, env: str = "local",
            agent_env: dict[str, str] | None = None, agent: Path | None = AGENT, recipe: str = "demo_online",
            harness: str = "acp") -> tuple[dict, Path, ArgvWatch]:
    """`agentcompass run RECIPE HARNESS gpt-5` on the one task, `agent` (default: the scripted ACP agent) uploaded
    and run on the bundled interpreter; the trial record, its dir, the argv watch."""
    host = BRIDGE_HOST if env == "docker" else "127.0.0.1"
    agent_env = {"ACP_TEST_MODELS": MODELS, **(agent_env or {})}
    uploaded = (f"harness.upload={hydra_dict({'agent_py': str(agent)})}",
                "harness.agent='$AGENT_DIR/py/bin/python3.12 $AGENT_FILES/agent_py'") if agent else ()
    with FakeLLMServer(llm, host="0.0.0.0" if env == "docker" else "127.0.0.1") as server, ArgvWatch(API_KEY) as watch:
        proc = run_cli("run", recipe, harness, PRESET, "--env", env, "--config-dir", str(online_demo(tmp)),
                       "--model-base-url", base_url(server, PRESET, host), "--no-model-check",
                       f"harness.cache_dir={cache}", f"harness.env={hydra_dict(agent_env)}", *uploaded,
                       "--results-dir", str(tmp / "results"), "--run-name", f"t-{uuid.uuid4().hex[:8]}", *args,
                       cwd=tmp, timeout=900, env={"AGENTCOMPASS_CACHE_DIR": str(tmp / "cache"), "HOME": str(tmp),
                                                  "OPENAI_API_KEY": API_KEY})
    assert proc.returncode == 0, proc.stderr[-3000:]
    [directory] = [p.parent for p in (tmp / "results").glob("*/*/summary.json")]
    [trial] = [json.loads(line) for line in (directory / "trials.jsonl").read_text().splitlines()]
    return trial, directory, watch


def test_an_acp_agent_fixes_the_demo_task_on_local(tmp_path, bundles):
    llm = FakeLLM(FIX_COMMANDS, api_key=API_KEY, finish="Fixed: median() now averages the two middle values.")
    trial, directory, watch = run_acp(tmp_path, bundles, llm)
    assert trial["status"] == "passed", trial
    assert {r.body["model"] for r in llm.successes} == {PRESET}  # chosen over ACP: the agent's default is gpt-4o
    usage = trial["usage"]
    assert usage["tokens_in"] == sum(r.usage["prompt_tokens"] for r in llm.successes)
    assert usage["tokens_out"] == sum(r.usage["completion_tokens"] for r in llm.successes)
    assert usage["cost_usd"] == pytest.approx(sum(token_price(PRESET, r.usage) for r in llm.successes), rel=1e-6)
    events = (directory / "tasks" / TASK / "attempt-1" / "acp.jsonl").read_text()
    assert "terminal/create" in events and "session/request_permission" in events and "mid - 1" in events
    assert files_containing(directory.parent, API_KEY) == []
    assert watch.samples > 10 and watch.seen == []


def test_mistral_vibe_fixes_the_demo_task_through_its_own_acp_server(tmp_path, bundles):
    """mistral-vibe's `vibe-acp`, bundled from PyPI, driven by our client (harnesses/mistral_vibe.yaml): a real ACP
    server checking our requests with the official ACP SDK's types."""
    llm = FakeLLM(FIX_COMMANDS, api_key=API_KEY, finish="Fixed.")
    trial, directory, watch = run_acp(tmp_path, bundles, llm, agent=None, harness="mistral_vibe")
    assert trial["status"] == "passed", trial
    assert {r.body["model"] for r in llm.successes} == {PRESET}
    served = [r.usage for r in llm.successes + llm.checks if r.status == 200]
    assert trial["usage"]["tokens_in"] == sum(u["prompt_tokens"] for u in served)
    assert trial["usage"]["cost_usd"] == pytest.approx(sum(token_price(PRESET, u) for u in served), rel=1e-6)
    result = json.loads((directory / "tasks" / TASK / "attempt-1" / "mistral_vibe.jsonl").read_text().splitlines()[-1])
    assert result["agentInfo"]["name"] == "@mistralai/mistral-vibe" and result["model"]["model"] == PRESET
    assert files_containing(directory.parent, API_KEY) == [] and watch.seen == []


def test_an_acp_agent_fixes_the_offline_demo_task_on_docker(tmp_path, bundles, base_image):
    """The demo task as shipped (no internet) on docker's default bridge: the image's own Python is never used,
    the agent reaches the model only through the gateway, and the tokens are the server's."""
    llm = FakeLLM(FIX_COMMANDS, api_key=API_KEY, finish="Fixed.")
    trial, directory, watch = run_acp(tmp_path, bundles, llm, "--benchmark-params",
                                      json.dumps({"sample_ids": [TASK]}), env="docker", recipe="demo")
    assert trial["status"] == "passed", trial
    usage = trial["usage"]
    assert usage["tokens_in"] == sum(r.usage["prompt_tokens"] for r in llm.successes)
    assert usage["cost_usd"] == pytest.approx(sum(token_price(PRESET, r.usage) for r in llm.successes), rel=1e-6)
    assert files_containing(directory.parent, API_KEY) == [] and watch.seen == []


@pytest.mark.parametrize(("setting", "says"), [((), "needs the agent's command line"),
                                               (("harness.agent=vibe-acp", "harness.package=mistral-vibe"),
                                                "is not pinned")])
def test_an_acp_run_without_a_usable_agent_is_refused_before_anything(setting, says, tmp_path):
    proc = run_cli("run", "demo", "acp", PRESET, "--env", "docker", *setting, "--results-dir", str(tmp_path / "r"),
                   cwd=tmp_path, env={"OPENAI_API_KEY": API_KEY, "AGENTCOMPASS_CACHE_DIR": str(tmp_path / "cache")})
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and says in proc.stderr, proc.stderr
    assert not (tmp_path / "r").exists() and not (tmp_path / "cache" / "cli-agents").exists()
