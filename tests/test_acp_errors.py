"""The acp harness's error classes (core/errors.py), each reached for real: the scripted endpoint answers as a
failing provider does, or the ACP agent ends its turn as a failing agent does, and the trial records the class."""

from __future__ import annotations

import pytest

from fake_llm_server import FakeLLM
from test_acp import bundles, run_acp  # noqa: F401 (bundles: the fixture)
from test_installed_agents import API_KEY, FIX_COMMANDS

pytestmark = pytest.mark.slow


def llm(**script) -> FakeLLM:
    return FakeLLM(FIX_COMMANDS, **{"api_key": API_KEY, "finish": "Fixed.", **script})


@pytest.mark.parametrize(("script", "error_class", "category", "says"), [
    ({"api_key": "sk-some-other-key"}, "AgentAuthenticationError", "agent", "rejected the API key"),
    ({"failures": [404]}, "ModelNotFoundError", "agent", "does not know the model"),
    ({"failures": [400]}, "BadRequestError", "agent", "refused a request"),
    ({"context_window_after": 1}, "ContextWindowExceededError", None, "context window"),
    ({"failures": [429]}, "ApiRateLimitError", "infra", "rate-limiting"),
    ({"outage_after": 0}, "ApiInternalServerError", "infra", "kept failing"),
])
def test_what_the_endpoint_answered_is_the_attempts_class(script, error_class, category, says, tmp_path, bundles):
    trial, _, _ = run_acp(tmp_path, bundles, llm(**script), "run.max_retries=0")
    # An infra error's record names its category, not its class: the class's own message says which one it was.
    assert trial["details"].get("error_class", error_class) == error_class, trial
    assert trial["error_category"] == category and says in trial["message"], trial


@pytest.mark.parametrize(("stop", "error_class"), [("refusal", "AgentSafetyRefusalError"),
                                                   ("max_tokens", "OutputLengthExceededError")])
def test_the_turns_stop_reason_is_the_attempts_class_and_its_work_is_graded(stop, error_class, tmp_path, bundles):
    """The agent did the work, then ended its turn on a refusal or the output limit: graded, the reward counts."""
    trial, _, _ = run_acp(tmp_path, bundles, llm(), agent_env={"ACP_TEST_STOP": stop})
    assert trial["details"]["error_class"] == error_class, trial
    assert (trial["status"], trial["reward"]) == ("passed", 1.0), trial


def test_an_agent_that_dies_is_a_non_zero_exit_graded(tmp_path, bundles):
    config = tmp_path / "dead.yaml"
    config.write_text("harness: {agent: 'sh -c \"echo starting >&2; exit 3\"'}\n")
    trial, _, _ = run_acp(tmp_path, bundles, llm(), "--config", str(config), agent=None)
    assert trial["details"]["error_class"] == "NonZeroAgentExitCodeError", trial
    assert (trial["status"], trial["reward"]) == ("failed", 0.0) and "starting" in trial["message"], trial


def test_an_agent_past_its_time_limit_is_stopped_and_graded(tmp_path, bundles):
    trial, _, _ = run_acp(tmp_path, bundles, llm(delay_s=60), "harness.timeout_s=6")
    assert trial["details"]["error_class"] == "AgentTimeoutError", trial
    assert (trial["status"], trial["reward"]) == ("failed", 0.0), trial
