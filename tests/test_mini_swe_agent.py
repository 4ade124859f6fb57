"""mini_swe_agent end to end: the real agent, a real HTTP model endpoint (scripted), real sandboxes: tokens, cost,
keys, tiers, retries, agent errors and limits."""

from __future__ import annotations

import json

import pytest

from fake_llm_server import FakeLLM
from mini_demo import (API_KEY, FIX_COMMANDS, PRICES, TASK, files_containing, isolated_env, read_trials, run_demo,
                       run_dir, user_config_dir)


@pytest.fixture(scope="module")
def solved(tmp_path_factory):
    """One priced run that fixes the bug on --env local, with the key given on the command line."""
    tmp = tmp_path_factory.mktemp("solved")
    llm = FakeLLM(FIX_COMMANDS, api_key=API_KEY)
    proc = run_demo(llm, tmp, "fake-coder", "--env", "local", "--config-dir", str(user_config_dir(tmp)),
                    "--model-api-key", API_KEY)
    return tmp, proc, llm, run_dir(tmp / "results")


def test_solves_the_demo_task_by_running_the_scripted_commands(solved):
    tmp, proc, llm, directory = solved
    [trial] = read_trials(directory)
    assert trial["status"] == "passed", trial
    assert trial["agent_exit_status"] == "submitted"
    assert [r.status for r in llm.requests] == [200, 200, 200]
    [check] = llm.checks  # the preflight: one 1-token request before the trial
    assert check.body["max_tokens"] == 1 and check.authorization == f"Bearer {API_KEY}"
    # The second request carries what the first command really printed in the sandbox.
    observation = json.dumps(llm.requests[1].body["messages"][-1])
    assert "FAILED" in observation and "Ran 7 tests" in observation
    assert llm.requests[0].body["tools"][0]["function"]["name"] == "bash"
    # mini-swe-agent's trajectory shape and name (its inspector finds *.traj.json), plus our fields.
    trajectory = json.loads((directory / "tasks" / TASK / "attempt-1" / f"{TASK}.traj.json").read_text())
    assert [m["role"] for m in trajectory["messages"]][-2:] == ["assistant", "exit"]
    assert trajectory["info"]["exit_status"] == "Submitted" and trajectory["instance_id"] == TASK
    assert trajectory["trajectory_format"] == "mini-swe-agent-1.1"
    assert trajectory["agentcompass"]["attempt"] == 1 and trajectory["agentcompass"]["model"] == "openai/fake-coder-1"


def test_tokens_and_cost_are_what_the_server_returned_times_the_preset_prices(solved):
    tmp, proc, llm, directory = solved
    summary = json.loads((directory / "summary.json").read_text())
    usages = [r.usage for r in llm.successes]
    prompt = sum(u["prompt_tokens"] for u in usages)
    completion = sum(u["completion_tokens"] for u in usages)
    cached = sum(u["prompt_tokens_details"]["cached_tokens"] for u in usages)
    expected = ((prompt - cached) * PRICES["input_per_mtok"] + cached * PRICES["cached_per_mtok"]
                + completion * PRICES["output_per_mtok"]) / 1e6
    assert (summary["model_calls"], summary["tokens_in"], summary["tokens_out"], summary["tokens_cached"]) == (
        len(usages), prompt, completion, cached)
    assert summary["cost_usd"] == pytest.approx(expected, abs=1e-6)
    assert summary["cost_known"] is True
    assert summary["cost_per_solved_usd"] == pytest.approx(expected, abs=1e-6)
    [trial] = read_trials(directory)
    assert 0 < trial["usage"]["generation_s"] <= trial["timings"]["agent"] <= trial["timings"]["total"]


def test_the_key_reaches_the_server_but_no_file_and_no_output(solved):
    tmp, proc, llm, directory = solved
    assert {r.authorization for r in llm.requests} == {f"Bearer {API_KEY}"}
    assert files_containing(tmp, API_KEY) == []  # results, cache, cwd, HOME
    assert API_KEY not in proc.stdout + proc.stderr


def test_no_banner_and_nothing_written_to_home(solved):
    tmp, proc, llm, directory = solved
    assert "mini-swe-agent" not in proc.stdout + proc.stderr
    assert list((tmp / "home").iterdir()) == []
    assert (tmp / "cache" / "mini-swe-agent").is_dir()


def test_a_sweep_over_tiers_sends_each_tiers_fields_and_writes_sweep_json(tmp_path):
    llm = FakeLLM(FIX_COMMANDS)
    run_demo(llm, tmp_path, "glm-5.2", "-m", "model.reasoning=none,high,max", "--model-api-key", API_KEY)
    # Hydra runs the jobs in order, each a 3-step conversation.
    bodies = [r.body for r in llm.successes]
    assert len(bodies) == 9
    assert len(llm.checks) == 1  # one endpoint and key: checked once for the whole sweep
    by_tier = {"none": bodies[0:3], "high": bodies[3:6], "max": bodies[6:9]}
    assert all(b["chat_template_kwargs"] == {"enable_thinking": False} for b in by_tier["none"])
    assert all(b["chat_template_kwargs"] == {"reasoning_effort": "high"} for b in by_tier["high"])
    assert all("chat_template_kwargs" not in b and "reasoning_effort" not in b for b in by_tier["max"])
    assert all(b["model"] == "zai-org/GLM-5.2-FP8" for b in bodies)
    sweep = json.loads((tmp_path / "results" / "test" / "sweep.json").read_text())
    assert sorted(row["reasoning"] for row in sweep["runs"]) == ["high", "max", "none"]
    assert all(row["passed"] == 1 for row in sweep["runs"])
    for summary_path in (tmp_path / "results" / "test").glob("*/summary.json"):
        summary = json.loads(summary_path.read_text())
        # Self-hosted: priced by the hour of generation (the preset's 50.7 USD/hour).
        assert summary["cost_usd"] == pytest.approx(50.7 * summary["generation_s"] / 3600, rel=0.01, abs=1e-5)
    leaked = files_containing(tmp_path, API_KEY)  # results, sweep.json, Hydra's multirun.yaml or outputs/
    assert leaked == []


def test_server_errors_then_success_are_retried(tmp_path):
    llm = FakeLLM(FIX_COMMANDS, failures=[500, 500])
    run_demo(llm, tmp_path, "openai_compatible", "model.name=fake-coder-1")
    assert [r.status for r in llm.requests] == [500, 500, 200, 200, 200]
    [trial] = read_trials(run_dir(tmp_path / "results"))
    assert trial["status"] == "passed" and trial["retries"] == 0
    # No price for this model anywhere: zero cost, marked unknown, no crash.
    assert trial["usage"]["cost_usd"] == 0 and trial["usage"]["cost_known"] is False


def test_a_rejected_key_fails_the_trial_as_an_agent_error_without_retries(tmp_path):
    llm = FakeLLM(FIX_COMMANDS, api_key="the-right-key")
    wrong = "sk-wrong-5f4dcc3b5aa765d61d83"
    # A completed run (exit 0): the summary reports the error.
    proc = run_demo(llm, tmp_path, "openai_compatible", "model.name=fake-coder-1", "--model-api-key", wrong,
                    "--max-retries", "2", "--no-model-check")
    [trial] = read_trials(run_dir(tmp_path / "results"))
    assert trial["status"] == "error" and trial["error_category"] == "agent", trial
    assert trial["retries"] == 0
    assert "401" in trial["message"] and "--model-api-key" in trial["message"]
    assert [r.status for r in llm.requests] == [401]  # neither litellm, mini-swe-agent nor we retried
    assert files_containing(tmp_path, wrong) == []
    assert wrong not in proc.stdout + proc.stderr


def test_an_agent_error_mid_run_keeps_the_usage_spent_before_it(tmp_path):
    llm = FakeLLM(FIX_COMMANDS, revoke_after=2)
    run_demo(llm, tmp_path, "openai_compatible", "model.name=fake-coder-1")
    [trial] = read_trials(run_dir(tmp_path / "results"))
    assert trial["status"] == "error" and trial["error_category"] == "agent", trial
    served = llm.successes
    assert len(served) == 2
    assert trial["usage"]["tokens_in"] == sum(r.usage["prompt_tokens"] for r in served)
    assert trial["usage"]["tokens_out"] == sum(r.usage["completion_tokens"] for r in served)


def test_a_harness_that_needs_a_model_refuses_none(cli, tmp_path):
    proc = cli("run", "demo", "mini_swe_agent", "none", "--results-dir", str(tmp_path / "r"), cwd=tmp_path)
    assert proc.returncode == 2
    assert "needs a model" in proc.stderr
    assert not (tmp_path / "r").exists()


def test_bad_harness_params_are_user_errors(cli, tmp_path):
    # --no-model-check: the endpoint's one-token check comes before the harness is made (it would import litellm)
    proc = cli("run", "demo", "mini_swe_agent", "glm-5.2", "--harness-params", '{"prompt_config": "no-such-config"}',
               "--no-model-check", "--results-dir", str(tmp_path / "r"), cwd=tmp_path, env=isolated_env(tmp_path))
    assert proc.returncode == 2 and "prompt_config 'no-such-config' not found" in proc.stderr
    proc = cli("run", "demo", "mini_swe_agent", "glm-5.2", "--harness-params", '{"step_limt": 3}',
               "--results-dir", str(tmp_path / "r"), cwd=tmp_path)
    assert proc.returncode == 2 and "step_limt" in proc.stderr
    assert not (tmp_path / "r").exists()


def test_unknown_reasoning_tier_is_a_user_error(cli, tmp_path):
    proc = cli("config", "show", "demo", "mini_swe_agent", "glm-5.2", "model.reasoning=hgh", cwd=tmp_path)
    assert proc.returncode == 2
    assert "'hgh' is not one of this model's tiers (none, high, max)" in proc.stderr


def test_step_limit_stops_the_agent_and_the_benchmark_still_grades(tmp_path):
    llm = FakeLLM(["ls"])  # never fixes anything, never submits
    run_demo(llm, tmp_path, "glm-5.2", "--harness-params", '{"step_limit": 2}')
    [trial] = read_trials(run_dir(tmp_path / "results"))
    assert trial["agent_exit_status"] == "limits_exceeded"
    assert trial["status"] == "failed"  # graded by the task's own tests: the bug is still there
    assert len(llm.successes) == 2


@pytest.mark.docker
def test_solves_the_demo_task_in_a_docker_container(base_image, tmp_path):
    llm = FakeLLM(["test -f /.dockerenv && echo inside-a-container", *FIX_COMMANDS])
    run_demo(llm, tmp_path, "glm-5.2", "--env", "docker", "--model-api-key", API_KEY)
    [trial] = read_trials(run_dir(tmp_path / "results"))
    assert trial["status"] == "passed" and trial["agent_exit_status"] == "submitted", trial
    assert "inside-a-container" in json.dumps(llm.requests[1].body["messages"][-1])
    assert files_containing(tmp_path, API_KEY) == []


def test_the_wall_time_limit_cuts_a_long_command_and_ends_the_run(tmp_path):
    llm = FakeLLM(["sleep 60"])
    run_demo(llm, tmp_path, "glm-5.2", "--harness-params", '{"wall_time_limit_s": 2}')
    directory = run_dir(tmp_path / "results")
    [trial] = read_trials(directory)
    assert trial["agent_exit_status"] == "timeout" and trial["status"] == "failed", trial
    assert trial["timings"]["agent"] < 40  # its 2 s limit on a busy machine, not the command's 60 s
    assert "timed out" in (directory / "tasks" / TASK / "attempt-1" / "agent.log").read_text()
