"""mini_swe_agent as mini-swe-agent's own SWE-bench runner sets it up: prompt configs, limits, submissions, caching,
cost limits (the end-to-end comparison is test_mini_parity.py)."""

from __future__ import annotations


import pytest

from fake_llm_server import FakeLLM
from mini_demo import FIX_COMMANDS, read_trials, run_demo, run_dir, user_config_dir


# -- parity with mini-swe-agent's own SWE-bench runner (issue 16); the end-to-end test is test_mini_parity.py --


def harness(**settings):
    from agentcompass.harnesses.mini_swe_agent import MiniSweAgentHarness

    return MiniSweAgentHarness(**settings)


def test_swebench_recipes_pick_the_swebench_prompt_config_and_the_users_params_win(cli, tmp_path):
    def prompt_config(*args: str) -> str:
        proc = cli("config", "show", *args, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        [line] = [line for line in proc.stdout.splitlines() if line.startswith("  prompt_config:")]
        return line.split(":", 1)[1].strip()

    assert prompt_config("swebench_verified", "mini_swe_agent", "gpt-5-mini") == "swebench"
    assert prompt_config("swebench_lite", "mini_swe_agent", "gpt-5-mini", "--harness-params",
                         '{"prompt_config": "mini"}') == "mini"
    assert prompt_config("swebench_lite", "mini_swe_agent", "gpt-5-mini", "harness.prompt_config=mini") == "mini"
    assert prompt_config("demo", "mini_swe_agent", "gpt-5-mini") == "mini"


def test_the_prompt_configs_limits_hold_unless_ours_are_set():
    swebench = mini_config("swebench")
    assert (swebench["agent"]["step_limit"], swebench["agent"]["cost_limit"]) == (250, 3.0)
    for name in ("swebench", "mini"):
        config = harness(prompt_config=name).agent_config(0)
        assert (config["step_limit"], config["cost_limit"]) == (mini_config(name)["agent"]["step_limit"],
                                                                mini_config(name)["agent"]["cost_limit"])
    config = harness(prompt_config="swebench", step_limit=7, cost_limit=0).agent_config(0)
    assert (config["step_limit"], config["cost_limit"], config["wall_time_limit_seconds"]) == (7, 0, 0)


def mini_config(name: str) -> dict:
    from minisweagent.config import get_config_from_spec

    return get_config_from_spec(name)


def test_a_submission_is_handed_over_only_where_the_config_submits_something():
    assert harness(prompt_config="swebench").submits is True  # `echo SUBMIT_LINE && cat patch.txt`
    assert harness(prompt_config="mini").submits is False  # a bare `echo SUBMIT_LINE`: the tree is graded
    assert harness(prompt_config="mini", submission=True).submits is True


@pytest.mark.parametrize("name, cached", [
    ("anthropic/claude-sonnet-4-5-20250929", True), ("openrouter/anthropic/claude-sonnet-4.5", True),
    ("bedrock/us.anthropic.claude-opus-4-1", True), ("openai/gpt-5-mini", False),
])
def test_prompt_caching_as_mini_swe_agent_sets_it(name, cached):
    from agentcompass.core.models import Meter
    from agentcompass.core.schema import ModelConfig

    lm = harness(prompt_config="swebench")._model(Meter(ModelConfig(name=name)), {})
    assert lm.config.set_cache_control == ("default_end" if cached else None)


def test_an_hourly_price_never_trips_the_cost_limit(tmp_path):
    llm = FakeLLM(FIX_COMMANDS)
    run_demo(llm, tmp_path, "glm-5.2", "--harness-params", '{"cost_limit": 1e-9}')
    [trial] = read_trials(run_dir(tmp_path / "results"))
    assert trial["agent_exit_status"] == "submitted" and trial["status"] == "passed", trial
    assert trial["usage"]["cost_usd"] > 1e-9  # the hourly share is still in the trial's cost


def test_a_per_token_price_trips_the_cost_limit(tmp_path):
    llm = FakeLLM(FIX_COMMANDS)
    run_demo(llm, tmp_path, "fake-coder", "--config-dir", str(user_config_dir(tmp_path)),
             "--harness-params", '{"cost_limit": 1e-9}')
    [trial] = read_trials(run_dir(tmp_path / "results"))
    assert trial["agent_exit_status"] == "limits_exceeded" and len(llm.successes) == 1, trial


def test_a_context_window_overflow_is_the_agents_failure_and_is_graded(tmp_path):
    llm = FakeLLM(FIX_COMMANDS, context_window_after=1)
    run_demo(llm, tmp_path, "openai_compatible", "model.name=fake-coder-1")
    [trial] = read_trials(run_dir(tmp_path / "results"))
    assert trial["status"] == "failed" and trial["error_category"] is None, trial
    assert trial["agent_exit_status"] == "context_window_exceeded"
    assert trial["usage"]["tokens_in"] == llm.successes[0].usage["prompt_tokens"]


def test_an_outage_keeps_every_token_spent_and_counts_the_failed_requests(tmp_path):
    llm = FakeLLM(FIX_COMMANDS, outage_after=1)
    run_demo(llm, tmp_path, "openai_compatible", "model.name=fake-coder-1", "--max-retries", "0")
    [trial] = read_trials(run_dir(tmp_path / "results"))
    assert trial["status"] == "error" and trial["error_category"] == "infra", trial
    assert trial["usage"]["tokens_in"] == llm.successes[0].usage["prompt_tokens"]
    assert trial["usage"]["model_errors"] == 2  # MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT=2: both tries failed


@pytest.mark.parametrize("isolation", ["none", "bwrap"])
def test_the_prompt_configs_interpreter_env_and_bash_env_hold_on_the_local_provider(tmp_path, isolation):
    """As under mini's `docker exec -e K=V IMAGE bash -c CMD`: BASH_ENV is sourced once, by the command's shell."""
    from agentcompass.harnesses.mini_swe_environment import SandboxEnvironment
    from agentcompass.providers.local.provider import LocalProvider
    from agentcompass.core.sandbox import SandboxSpec

    box = LocalProvider(isolation=isolation, root=str(tmp_path / "ws")).open(SandboxSpec(name="t", workdir="/app"))
    try:
        box.exec("printf 'export FROM_RC=$((${FROM_RC:-0} + 1))\\n' > /app/rc.sh")
        env = SandboxEnvironment(box, "/app", {"BASH_ENV": "/app/rc.sh", "PAGER": "cat"}, 30, float("inf"),
                                 log=lambda text: None, interpreter=["bash", "-c"])
        output = env.execute({"command": 'echo "rc=$FROM_RC pager=$PAGER $0"; echo err >&2'})
    finally:
        box.close()
    assert output["returncode"] == 0
    assert output["output"] == "rc=1 pager=cat bash\nerr\n"


def test_a_submission_over_the_exec_output_cap_is_handed_over_whole(tmp_path):
    """mini has no output cap: a submit command printing more than 10 MiB submits all of it, and CRLF
    output reads as mini's text mode reads it."""
    import time as _time

    from minisweagent.exceptions import Submitted

    from agentcompass.harnesses.mini_swe_environment import SandboxEnvironment
    from agentcompass.providers.local.provider import LocalProvider
    from agentcompass.core.sandbox import DEFAULT_OUTPUT_CAP, SandboxSpec, TRUNCATION_MARK

    sandbox = LocalProvider(isolation="auto").open(SandboxSpec(name="t", workdir=str(tmp_path), runs_on_host=True))
    env = SandboxEnvironment(sandbox, str(tmp_path), {}, 60, _time.monotonic() + 600, log=lambda text: None)
    line = "+" + "x" * 78 + "\r"
    try:
        assert env.execute({"command": "printf 'a\\r\\nb\\r\\n'"})["output"] == "a\nb\n"
        sandbox.exec(f"yes '{line}' | head -n 140000 > big.txt", cwd=str(tmp_path))
        with pytest.raises(Submitted) as submitted:
            env.execute({"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat big.txt && echo the-end"})
    finally:
        sandbox.close()
    submission = submitted.value.messages[0]["extra"]["submission"]
    assert len(submission) > DEFAULT_OUTPUT_CAP and TRUNCATION_MARK not in submission
    assert submission.count("+" + "x" * 78 + "\n") == 140000 and submission.endswith("the-end\n")
