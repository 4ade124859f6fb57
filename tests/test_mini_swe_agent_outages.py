"""mini_swe_agent through outages: Ctrl-C while a model call is in flight, the model preflight, bounded connects."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from conftest import run_cli
from dead_endpoints import kernel_connect_timeout_s, refusing_endpoint, silent_endpoint, unconnectable_endpoint
from fake_llm_server import FakeLLM, FakeLLMServer
from mini_demo import (FIX_COMMANDS, ONLY_TASK, interrupt_and_check, isolated_env, read_trials, run_dir, start_demo,
                       wait_for)


# -- outages: Ctrl-C while a model call is in flight, the preflight, bounded connects (issue 15) ---------


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
                                       "model.connect_timeout_s=1", "--model-base-url", base_url,
                                       seconds=kernel_connect_timeout_s())  # unbounded, one connect alone takes this
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
    assert elapsed < kernel_connect_timeout_s()
