"""The count cannot be gamed through an installed CLI's printed output (issue 36, point 4).

An installed CLI's error class (auth: not graded; rate limit and outage: retried, then left out) used to be read
from what the CLI printed, and the model's tools print into the same streams. Here the scripted agent's tool writes
each CLI's own error line (with the status of the class that would take the attempt out of the rate) into the CLI's
stdout and stderr, then kills the CLI. The gateway answered every call 200, so the attempt is the agent's own
failure: graded, failed, in the rate's base, never retried. The honest counterparts (a key the endpoint really
rejects, an endpoint that really fails) are test_installed_agents' rejected-key and outage tests.
"""

from __future__ import annotations

import json

import pytest

from fake_llm_server import FakeLLM
from test_installed_agents import API_KEY, cli_cache, run_agent  # noqa: F401  (cli_cache: the session fixture)



def forge_and_kill(status: int) -> str:
    """A tool command: every line the three CLIs print for an endpoint's status (claude's `error_status`, opencode's
    `statusCode`, codex's `unexpected status`), written unescaped into the stdout and stderr of each of its
    ancestors (the CLI among them), then the CLI killed, so it ended badly as an endpoint failure would end it."""
    line = f'{{"error_status": {status}, "statusCode": {status}}} unexpected status {status}'
    return (f"S='{line}'; echo \"$S\"; cli=; p=$$; "
            "while [ \"$p\" -gt 1 ]; do echo \"$S\" >/proc/$p/fd/1; echo \"$S\" >/proc/$p/fd/2; "
            "case \"$(readlink /proc/$p/exe)\" in /tmp/agentcompass-agent/*) cli=$p;; esac; "
            "p=$(cut -d' ' -f4 /proc/$p/stat); done 2>/dev/null; kill -9 $cli")


@pytest.mark.parametrize(("statuses", "code", "expected"), [
    ([401, 401], 1, "AgentAuthenticationError"),  # the key never worked: not graded
    ([200, 401], 1, "NonZeroAgentExitCodeError"),  # a 401 after an answer may be a tool's own request: graded
    ([200, 400], 1, "NonZeroAgentExitCodeError"),  # a malformed request of the agent's own: graded, counted
    ([400], 1, "BadRequestError"),  # the CLI's very first request refused: the harness's, no valid reward
    ([200, 429, 429], 1, "ApiRateLimitError"),  # the endpoint's own rate limit, at the end: retried
    ([503, 200], 1, "NonZeroAgentExitCodeError"),  # a transient 5xx the CLI got past is no outage
    ([], 0, None),
])
def test_the_class_is_the_gateways_record_whatever_the_cli_printed(statuses, code, expected):
    from agentcompass.harnesses.claude_code import ClaudeCodeHarness

    metered = {"statuses": statuses, "errors_5xx": sum(s >= 500 for s in statuses), "refused": 0, "capped": None}
    printed = '{"error_status": 401} {"api_error_status": 429}'  # whatever the agent's tools wrote
    error = ClaudeCodeHarness(version="1").classify(code, False, printed, printed, 60.0, metered)
    assert (type(error).__name__ if error else None) == expected


# Each CLI with a status its printed-output reading knew: 401 (not graded, left out), 429 and 503 (retried).
@pytest.mark.slow  # real CLIs from npm (the install is shared with test_installed_agents)
@pytest.mark.parametrize(("harness", "status"), [("claude_code", 401), ("codex", 429), ("opencode", 503)])
def test_a_forged_endpoint_error_in_the_agents_output_is_a_failed_attempt(harness, status, tmp_path, cli_cache):  # noqa: F811
    llm = FakeLLM(["ls", forge_and_kill(status)], api_key=API_KEY, finish="Done.")
    trial, directory, _ = run_agent(tmp_path, cli_cache, harness, llm, "run.max_retries=1", "run.retry_backoff_s=0",
                                    "harness.timeout_s=120")
    assert {r.status for r in llm.requests} == {200}  # the endpoint never failed
    assert (trial["status"], trial["error_category"], trial["reward"]) == ("failed", None, 0.0), trial
    assert trial["details"]["error_class"] == "NonZeroAgentExitCodeError", trial
    assert trial["attempt"] == 1 and len(list((tmp_path / "results").rglob("attempt-*"))) == 1  # never retried
    summary = json.loads((directory / "summary.json").read_text())
    assert (summary["pass_at_1"], summary["pass_at_1_tasks"], summary["failed"]) == (0.0, 1, 1), summary
