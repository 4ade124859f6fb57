"""The Python CLIs end to end (aider first): each really installed from PyPI into a bundle with the host's CPython
(once per machine), run in real sandboxes against the scripted model endpoint."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from conftest import run_cli
from fake_llm_server import Action, FakeLLM, FakeLLMServer
from shared_cache import cache_dir
from test_installed_agents import (API_KEY, BRIDGE_HOST, TASK, ArgvWatch, base_url, files_containing, online_demo,
                                   token_price)

pytestmark = pytest.mark.slow  # a PyPI install per CLI (once per machine), real CLIs

PRESET = "gpt-5"
# What a competent aider answers: a SEARCH/REPLACE edit of the off-by-one (its `diff` edit format).
EDIT = """The even case averages the wrong pair: it must be the two middle values.

stats.py
```python
<<<<<<< SEARCH
    return (data[mid] + data[mid + 1]) / 2
=======
    return (data[mid - 1] + data[mid]) / 2
>>>>>>> REPLACE
```
"""


class EditingLLM(FakeLLM):
    """For a CLI that edits by text, not tools: the replies of its main conversation (the one whose system prompt
    teaches SEARCH/REPLACE blocks) get `text`; every other tool-less request (commit messages, summaries) gets "OK"."""

    def __init__(self, text: str, **kwargs: Any) -> None:
        super().__init__(["true"], api_key=API_KEY, **kwargs)
        self.text, self.edited = text, 0

    def check_reply(self, api: str, body: dict[str, Any], authorization: str) -> tuple[int, Any]:
        status, action = super().check_reply(api, body, authorization)
        prompt = json.dumps(body.get("system")) + json.dumps(body.get("messages"))
        if status == 200 and "SEARCH/REPLACE" in prompt:  # asked again once the file is in the chat: the same edit
            self.edited += 1
            usage = self.usage_for(self.edited)
            self.checks[-1].usage = usage
            return 200, Action(0, None, self.text, usage)
        return status, action


@pytest.fixture(scope="module")
def bundles() -> Path:
    return cache_dir("cli-agents")


def run_cli_agent(tmp: Path, cache: Path, harness: str, llm: FakeLLM, *args: str,
                  env: str = "local") -> tuple[dict, Path, ArgvWatch]:
    """`agentcompass run demo HARNESS gpt-5` on the one task (on local, where an offline task cannot reach the
    gateway, its copy with internet); the trial record, its dir, the argv watch."""
    recipe = ("demo_online", "--config-dir", str(online_demo(tmp))) if env == "local" else ("demo",)
    host = BRIDGE_HOST if env == "docker" else "127.0.0.1"
    with FakeLLMServer(llm, host="0.0.0.0" if env == "docker" else "127.0.0.1") as server, ArgvWatch(API_KEY) as watch:
        proc = run_cli("run", *recipe[:1], harness, PRESET, "--env", env, "--model-base-url", base_url(server, PRESET, host),
                       "--no-model-check", f"harness.cache_dir={cache}", "--benchmark-params",
                       json.dumps({"sample_ids": [TASK]}), "--results-dir", str(tmp / "results"),
                       "--run-name", f"t-{uuid.uuid4().hex[:8]}", *recipe[1:], *args, cwd=tmp, timeout=900,
                       env={"AGENTCOMPASS_CACHE_DIR": str(tmp / "cache"), "HOME": str(tmp), "OPENAI_API_KEY": API_KEY})
    assert proc.returncode == 0, proc.stderr[-3000:]
    [directory] = [p.parent for p in (tmp / "results").glob("*/*/summary.json")]
    [trial] = [json.loads(line) for line in (directory / "trials.jsonl").read_text().splitlines()]
    return trial, directory, watch


def assert_metered(trial: dict, llm: FakeLLM, directory: Path, watch: ArgvWatch) -> None:
    """The trial's tokens and cost are the server's, every call counted; the key is in no file and no argv."""
    served = [r.usage for r in llm.requests + llm.checks if r.status == 200]
    usage = trial["usage"]
    assert usage["tokens_in"] == sum(u["prompt_tokens"] for u in served)
    assert usage["tokens_out"] == sum(u["completion_tokens"] for u in served)
    assert usage["cost_known"] is True
    assert usage["cost_usd"] == pytest.approx(sum(token_price(PRESET, u) for u in served), rel=1e-6)
    assert files_containing(directory.parent, API_KEY) == []
    assert watch.samples > 10 and watch.seen == []


@pytest.mark.parametrize(("env", "tier"), [("local", "low"), ("docker", "high")])
def test_aider_fixes_the_offline_demo_task(env, tier, tmp_path, bundles, request):
    """On docker the shipped task (no internet, the default bridge); each run at another tier, which every request
    carries (the gateway sets it), each request one the chat completions API takes (the openai SDK's types)."""
    from api_requests import problems

    if env == "docker":
        request.getfixturevalue("base_image")
    llm = EditingLLM(EDIT)
    trial, directory, watch = run_cli_agent(tmp_path, bundles, "aider", llm, "harness.args=[--edit-format,diff]",
                                            f"model.reasoning={tier}", env=env)
    assert trial["status"] == "passed", trial
    assert_metered(trial, llm, directory, watch)
    served = llm.requests + llm.checks
    assert llm.edited >= 1 and {r.body.get("reasoning_effort") for r in served} == {tier}
    assert [p for r in served for p in problems("chat", r.body)] == []
    assert "Applied edit to stats.py" in (directory / "tasks" / TASK / "attempt-1" / "aider.jsonl").read_text()


def test_aider_with_a_rejected_key_is_the_agents_authentication_error(tmp_path, bundles):
    """aider prints litellm's AuthenticationError and exits 0: the attempt is still the key's failure, not a pass
    or a failed exit, and it is not retried."""
    llm = EditingLLM(EDIT)
    llm.api_key = "sk-some-other-key"
    trial, _, _ = run_cli_agent(tmp_path, bundles, "aider", llm)
    assert trial["details"].get("error_class") == "AgentAuthenticationError", trial
    assert trial["status"] == "error" and trial["error_category"] == "agent" and trial["attempt"] == 1, trial
