"""An installed CLI's own agent limit (`harness.timeout_s`, Harbor's `override_timeout_sec`) follows the run's agent
multiplier and cap as Harbor 0.26 resolves it (harbor/trial/trial.py `_compute_agent_timeout_sec`: min(override,
max_timeout_sec) x (agent_timeout_multiplier, else timeout_multiplier))."""

from __future__ import annotations

import pytest

from agentcompass.core.limits import scaled
from agentcompass.core.schema import RunConfig
from agentcompass.core.task import Task
from agentcompass.harnesses.claude_code import ClaudeCodeHarness
from fake_llm_server import FakeLLM
from test_installed_agents import API_KEY, FIX_COMMANDS, cli_cache, run_agent  # noqa: F401  (cli_cache: a fixture)


@pytest.mark.parametrize(("run", "own", "expected"), [
    ({"timeout_multiplier": 3.0}, 10.0, 30.0),
    ({"timeout_multiplier": 3.0, "agent_timeout_multiplier": 0.5}, 10.0, 5.0),  # the phase's own wins
    ({"timeout_multiplier": 2.0, "agent_max_timeout_sec": 4.0}, 10.0, 8.0),  # capped, then multiplied
    ({"timeout_multiplier": 2.0}, None, 1200.0),  # no own limit: the task's, multiplied
    ({}, 10.0, 10.0),
])
def test_the_harness_time_limit_is_multiplied_and_capped_as_harbors_override(run, own, expected):
    task = scaled(Task(id="t", instruction="x", agent_timeout_s=600.0), RunConfig(**run))
    harness = ClaudeCodeHarness(version="1.0.0", **({"timeout_s": own} if own else {}))
    assert harness.time_limit_s(task) == expected


@pytest.mark.slow
def test_a_cli_is_stopped_at_its_multiplied_own_limit(tmp_path, cli_cache):  # noqa: F811
    llm = FakeLLM(FIX_COMMANDS, api_key=API_KEY, finish="Fixed.", delay_s=60)
    trial, _, _ = run_agent(tmp_path, cli_cache, "claude_code", llm, "harness.timeout_s=4",
                            "--agent-timeout-multiplier", "2")
    assert trial["details"]["error_class"] == "AgentTimeoutError", trial
    assert "ran past the agent time limit of 8 s" in trial["message"]
