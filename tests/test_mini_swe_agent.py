"""mini_swe_agent end to end: the real agent, a real HTTP model endpoint (scripted), real sandboxes.

Longer than 400 lines because its cases share the scripted endpoint and sandbox fixtures; split with them next.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import run_cli
from dead_endpoints import refusing_endpoint, silent_endpoint, unconnectable_endpoint
from fake_llm_server import FakeLLM, FakeLLMServer

TASK = "fix-median-bug"
ONLY_TASK = json.dumps({"sample_ids": [TASK]})
# What a competent agent would do: see the failure, fix the off-by-one, submit.
FIX_COMMANDS = [
    "cd /app && python3 -m unittest test_stats 2>&1 | tail -3",
    "sed -i 's/return (data\\[mid\\] + data\\[mid + 1\\]) \\/ 2/return (data[mid - 1] + data[mid]) \\/ 2/' /app/stats.py"
    " && python3 -m unittest test_stats",
    "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT",
]
PRICES = {"input_per_mtok": 1.25, "output_per_mtok": 10.0, "cached_per_mtok": 0.125}
API_KEY = "sk-test-d41d8cd98f00b204e980"


def user_config_dir(tmp: Path) -> Path:
    """A user models/ dir with a preset priced per million tokens (litellm knows no price for it)."""
    models = tmp / "user-conf" / "models"
    models.mkdir(parents=True, exist_ok=True)
    (models / "fake-coder.yaml").write_text(textwrap.dedent(f"""
        name: openai/fake-coder-1
        description: a scripted test endpoint, priced per million tokens
        api: openai
        pricing: {json.dumps(PRICES)}
    """))
    return tmp / "user-conf"


def isolated_env(tmp: Path) -> dict[str, str]:
    """An empty HOME to prove nothing is written there, and our cache dir inside tmp."""
    home = tmp / "home"
    home.mkdir(exist_ok=True)
    return {"HOME": str(home), "AGENTCOMPASS_CACHE_DIR": str(tmp / "cache"), "MSWEA_GLOBAL_CONFIG_DIR": "",
            "OPENAI_API_KEY": "", "MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": "2"}


def run_dir(results: Path) -> Path:
    [found] = [p.parent for p in results.glob("*/*/summary.json")]
    return found


def read_trials(directory: Path) -> list[dict]:
    return [json.loads(line) for line in (directory / "trials.jsonl").read_text().splitlines()]


def files_containing(root: Path, needle: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and needle.encode() in p.read_bytes()]


def run_demo(llm: FakeLLM, tmp: Path, preset: str, *args: str):
    """`agentcompass run demo mini_swe_agent PRESET ARGS` on the one task, against a fresh fake endpoint."""
    with FakeLLMServer(llm) as server:
        proc = run_cli("run", "demo", "mini_swe_agent", preset, *args, "--model-base-url", server.base_url,
                       "--benchmark-params", ONLY_TASK, "--results-dir", str(tmp / "results"), "--run-name", "test",
                       cwd=tmp, env=isolated_env(tmp))
    assert proc.returncode == 0, proc.stderr
    return proc


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
    proc = cli("run", "demo", "mini_swe_agent", "glm-5.2", "--harness-params", '{"prompt_config": "no-such-config"}',
               "--results-dir", str(tmp_path / "r"), cwd=tmp_path, env=isolated_env(tmp_path))
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


# -- outages: Ctrl-C while a model call is in flight, the preflight, bounded connects (issue 15) ---------


def start_demo(tmp: Path, base_url: str, run_name: str, *args: str) -> tuple[subprocess.Popen, Path, Path]:
    """`agentcompass run demo mini_swe_agent ...` in the background; returns it and its stderr file."""
    stderr = tmp / "stderr.txt"
    env = {**os.environ, **isolated_env(tmp), "PYTHONFAULTHANDLER": "1"}
    env.pop("AGENTCOMPASS_DEBUG", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentcompass", "run", "demo", "mini_swe_agent", "openai_compatible",
         "model.name=fake-coder-1", "--model-base-url", base_url, "--benchmark-params", ONLY_TASK,
         "--results-dir", str(tmp / "results"), "--run-name", run_name, *args],
        cwd=tmp, env=env, stdout=subprocess.DEVNULL, stderr=open(stderr, "w"))
    return proc, stderr, tmp / "results" / run_name


def wait_for(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def interrupt_and_check(proc: subprocess.Popen, stderr: Path, run_name: str) -> None:
    """SIGINT ends the run within seconds, exit 130, no retries after it and no process left."""
    proc.send_signal(signal.SIGINT)
    start = time.monotonic()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)  # PYTHONFAULTHANDLER: every thread's stack goes to stderr
        proc.wait()
        pytest.fail(f"the run ignored SIGINT for 60 s: {stderr.read_text()[-6000:]}")
    elapsed = time.monotonic() - start
    text = stderr.read_text()
    assert proc.returncode == 130, text[-2000:]
    assert elapsed < 20, f"took {elapsed:.1f}s to stop"
    assert "Traceback" not in text
    time.sleep(1.0)
    assert "Retrying" not in text[text.find("interrupted"):], text[-2000:]
    assert run_name not in subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout


@pytest.mark.parametrize("endpoint", ["silent", "refusing"])
def test_ctrl_c_while_a_model_call_is_in_flight_ends_the_run(tmp_path, endpoint):
    run_name = f"ctrlc-{endpoint}-{os.getpid()}"
    with silent_endpoint() as (silent_url, accepted):
        base_url = silent_url if endpoint == "silent" else refusing_endpoint()
        proc, stderr, root = start_demo(tmp_path, base_url, run_name, "--no-model-check")
        try:
            if endpoint == "silent":
                wait_for(lambda: accepted, 60, "the model call")
            else:  # refused calls: mini-swe-agent sleeps between its retries
                wait_for(lambda: any(root.glob("*/tasks/*/attempt-1")), 60, "the trial")
                time.sleep(6)
            interrupt_and_check(proc, stderr, run_name)
        finally:
            if proc.poll() is None:
                proc.kill()


def test_ctrl_c_during_the_model_preflight_ends_the_run(tmp_path):
    run_name = f"ctrlc-preflight-{os.getpid()}"
    with silent_endpoint() as (base_url, accepted):
        proc, stderr, root = start_demo(tmp_path, base_url, run_name)
        try:
            wait_for(lambda: accepted, 60, "the preflight request")
            interrupt_and_check(proc, stderr, run_name)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert not root.exists()  # the preflight comes before anything is written


def run_failing_preflight(cli, tmp: Path, *args: str, seconds: float):
    """A run whose model preflight must fail: exit 2, one line, nothing written, within `seconds`."""
    start = time.monotonic()
    proc = cli("run", "demo", "mini_swe_agent", *args, "--benchmark-params", ONLY_TASK,
               "--results-dir", str(tmp / "r"), cwd=tmp, env=isolated_env(tmp))
    assert time.monotonic() - start < seconds
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert not (tmp / "r").exists()
    return proc.stderr


def test_the_preflight_reports_a_missing_key_without_a_request(cli, tmp_path):
    stderr = run_failing_preflight(cli, tmp_path, "gpt-5-mini", seconds=60)
    assert "no API key for model 'openai/gpt-5-mini'" in stderr and "OPENAI_API_KEY" in stderr


def test_the_preflight_reports_a_rejected_key(cli, tmp_path):
    llm = FakeLLM(FIX_COMMANDS, api_key="the-right-key")
    wrong = "sk-wrong-8f14e45fceea167a5a36"
    with FakeLLMServer(llm) as server:
        stderr = run_failing_preflight(cli, tmp_path, "openai_compatible", "model.name=fake-coder-1", "--model-base-url",
                                       server.base_url, "--model-api-key", wrong, seconds=60)
    assert "rejected the API key" in stderr and "--model-api-key" in stderr and wrong not in stderr
    assert [c.status for c in llm.checks] == [401] and llm.requests == []


def test_the_preflight_reports_an_endpoint_that_refuses_connections(cli, tmp_path):
    stderr = run_failing_preflight(cli, tmp_path, "openai_compatible", "model.name=fake-coder-1",
                                   "--model-base-url", refusing_endpoint(), seconds=60)
    assert "cannot reach the model endpoint" in stderr and "--no-model-check" in stderr


def test_the_preflight_gives_up_on_an_unconnectable_endpoint_after_the_connect_timeout(cli, tmp_path):
    with unconnectable_endpoint() as base_url:
        stderr = run_failing_preflight(cli, tmp_path, "openai_compatible", "model.name=fake-coder-1",
                                       "model.connect_timeout_s=1", "--model-base-url", base_url, seconds=45)
    assert "did not answer" in stderr and "1 s to connect" in stderr


def test_a_model_call_that_cannot_connect_fails_as_infra_within_the_connect_timeout(tmp_path):
    with unconnectable_endpoint() as base_url:
        start = time.monotonic()
        proc = run_cli("run", "demo", "mini_swe_agent", "openai_compatible", "model.name=fake-coder-1",
                       "model.connect_timeout_s=1", "--model-base-url", base_url, "--no-model-check",
                       "--max-retries", "0", "--benchmark-params", ONLY_TASK, "--results-dir", str(tmp_path / "results"),
                       "--run-name", "test", cwd=tmp_path, env={**isolated_env(tmp_path), "MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": "1"})
        elapsed = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr
    [trial] = read_trials(run_dir(tmp_path / "results"))
    assert trial["status"] == "error" and trial["error_category"] == "infra", trial
    assert "Timeout" in trial["message"]
    # Unbounded, one call waits for the kernel's connect timeout (minutes), three times over.
    assert elapsed < 90


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
