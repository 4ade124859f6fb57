"""Spend caps at the model gateway (run.max_trial_tokens, run.max_trial_cost_usd, run.max_tokens, run.max_cost_usd):
a scripted upstream with known usage per reply; the call past a cap is refused with the reason, the agent is
stopped, the attempt fails with the reason in its message, and a run's cap stops its later attempts."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from agentcompass.core.errors import SpendCapReached
from agentcompass.core.schema import GatewaySettings, ModelConfig
from agentcompass.gateway.caps import SpendCaps
from agentcompass.gateway.server import Gateway
from gateway_fixtures import GLM, HELLO, REPO, TESTS, new_trial, post
from gateway_fixtures import local_sandbox, upstream  # noqa: F401 (fixtures)
from gateway_upstream import KEY

PER_TOKEN = {"input_per_mtok": 1000.0, "output_per_mtok": 1000.0}  # a dollar per thousand tokens, cache reads alike


def tokens(usage: dict[str, Any]) -> int:
    return usage["prompt_tokens"] + usage["completion_tokens"]


def capped_gateway(url: str, caps: SpendCaps, **changes: Any) -> Gateway:
    model = ModelConfig(**{**GLM, "base_url": f"{url}/v1", "api_key": KEY, **changes})
    return Gateway(model, "captest", GatewaySettings(), caps=caps).start()


def call(endpoint: Any) -> Any:
    return post(f"{endpoint.openai_base_url}/chat/completions", json={"messages": HELLO},
                headers={"authorization": f"Bearer {endpoint.api_key}"})


@pytest.mark.parametrize("caps, changes, says", [
    (SpendCaps(trial_tokens=2000), {}, "run.max_trial_tokens is 2,000"),
    (SpendCaps(trial_cost_usd=2.0), {"pricing": PER_TOKEN}, "run.max_trial_cost_usd is $2"),
], ids=["tokens", "dollars"])
def test_a_trial_past_its_cap_gets_no_more_calls(upstream, local_sandbox, tmp_path, caps, changes, says):
    gateway = capped_gateway(upstream.url, caps, **changes)
    try:
        endpoint = gateway.endpoint(new_trial(tmp_path, "a"), local_sandbox)
        assert [call(endpoint).status_code for _ in range(2)] == [200, 200]  # 1,188 then 2,524 tokens: under, then past
        refused = call(endpoint)
        assert refused.status_code == 400 and says in refused.json()["error"]["message"], refused.text
        assert f"{sum(map(tokens, upstream.usages)):,}" in refused.text or "$2.5240" in refused.text
        assert len(upstream.received) == 2 and endpoint.capped.is_set()
        assert endpoint.usage()["capped"] in refused.json()["error"]["message"]
        other = gateway.endpoint(new_trial(tmp_path, "b"), local_sandbox)  # a trial's cap is its own
        assert call(other).status_code == 200 and not other.capped.is_set()
    finally:
        gateway.stop()


def test_a_runs_cap_holds_across_its_trials_and_refuses_new_ones(upstream, local_sandbox, tmp_path):
    gateway = capped_gateway(upstream.url, SpendCaps(run_tokens=2000))
    try:
        first = gateway.endpoint(new_trial(tmp_path, "a"), local_sandbox)
        second = gateway.endpoint(new_trial(tmp_path, "b"), local_sandbox)
        assert call(first).status_code == 200 and call(second).status_code == 200  # 1,188 + 1,336 tokens
        for endpoint in (first, second):
            refused = call(endpoint)
            assert refused.status_code == 400 and "run.max_tokens is 2,000" in refused.text
            assert f"{sum(map(tokens, upstream.usages)):,} tokens" in refused.text
        with pytest.raises(SpendCapReached, match="this attempt was not started"):
            gateway.endpoint(new_trial(tmp_path, "c"), local_sandbox)
        assert len(upstream.received) == 2
    finally:
        gateway.stop()


def test_under_a_cap_an_attempt_has_a_bounded_number_of_calls_in_flight(upstream, local_sandbox, tmp_path):
    """Every call is checked against the cap before it starts, so an agent that opened many at once would overshoot
    the cap by all of them: under a cap, the calls past MAX_IN_FLIGHT wait (a 429, which clients retry)."""
    import contextlib
    import threading

    import httpx

    from agentcompass.gateway.caps import MAX_IN_FLIGHT

    upstream.gate = threading.Event()  # each stream holds after its first event
    gateway = capped_gateway(upstream.url, SpendCaps(trial_tokens=10**9))
    try:
        endpoint = gateway.endpoint(new_trial(tmp_path), local_sandbox)
        url, auth = f"{endpoint.openai_base_url}/chat/completions", {"authorization": f"Bearer {endpoint.api_key}"}
        held = []  # each stream's line iterator: one dropped would close its stream
        with httpx.Client(timeout=60) as client, contextlib.ExitStack() as streams:
            for _ in range(MAX_IN_FLIGHT):
                reply = streams.enter_context(client.stream("POST", url, json={"messages": HELLO, "stream": True},
                                                            headers=auth))
                held.append(reply.iter_lines())
                assert reply.status_code == 200 and next(held[-1])
            extra = client.post(url, json={"messages": HELLO}, headers=auth)
            assert extra.status_code == 429 and "too many model calls" in extra.text
            assert len(upstream.received) == MAX_IN_FLIGHT
            upstream.gate.set()
        assert call(endpoint).status_code == 200  # once they ended, calls go through again
    finally:
        upstream.gate.set()
        gateway.stop()


# -- end to end: an agent that never stops on its own -------------------------------------------------------------
def looper_args(tmp_path: Path, url: str, *extra: str, env: str = "local") -> list[str]:
    """`run demo gateway_looper glm-5.2` on one task; env bwrap: the task with internet (its own network through
    pasta; an offline task would reach only the gateway's one port, which this test does not need to show)."""
    folder = tmp_path / "config" / "harnesses"
    folder.mkdir(parents=True, exist_ok=True)
    recipe = "demo"
    if env == "bwrap":
        recipe = "demo_online"
        task = tmp_path / "config" / "recipes" / recipe / "fix-median-bug"
        shutil.copytree(REPO / "recipes" / "demo" / "fix-median-bug", task)
        toml = task / "task.toml"
        toml.write_text(toml.read_text().replace("allow_internet = false", "allow_internet = true"))
        (task.parent.parent / f"{recipe}.yaml").write_text(f"name: {recipe}\ndescription: demo with internet\n"
                                                            f"format: harbor\nsource: {{path: {recipe}}}\nruns_on_host: true\n")
    (folder / "gateway_looper.yaml").write_text("name: gateway_looper\ndescription: calls the gateway until stopped\n"
                                                "impl: gateway_looper:GatewayLooper\nneeds_model: true\nversion: '0'\n"
                                                "timeout_s: 600\n")
    isolation = {"local": ["--env-params", '{"isolation": "none"}'], "bwrap": ["--env-params", '{"isolation": "bwrap"}']}
    return ["run", recipe, "gateway_looper", "glm-5.2", "--model-base-url", f"{url}/v1", "--model-api-key", KEY,
            "--no-model-check", "--config-dir", str(tmp_path / "config"),
            *isolation.get(env, ["--env", env]), "--benchmark-params", '{"sample_ids": ["fix-median-bug"]}', "--results-dir", str(tmp_path / "results"),
            "--run-name", "caps", "--task-concurrency", "1", *extra]


def trials_of(tmp_path: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    (run_dir,) = (tmp_path / "results" / "caps").iterdir()
    trials = [json.loads(line) for line in (run_dir / "trials.jsonl").read_text().splitlines()]
    return sorted(trials, key=lambda t: t["attempt"]), json.loads((run_dir / "summary.json").read_text())


@pytest.mark.parametrize("env", ["local", "bwrap", pytest.param("docker", marks=pytest.mark.docker)])
def test_an_agent_at_its_trial_cap_is_stopped_and_its_attempt_failed(upstream, tmp_path, monkeypatch, env, request):
    """The stop reaches the CLI in each kind of sandbox: bubblewrap gives each command its own PID namespace, docker
    runs the stop as a second exec while the CLI's own still runs."""
    from agentcompass.commands.cli import main

    if env == "docker":
        request.getfixturevalue("base_image")
    monkeypatch.syspath_prepend(str(TESTS))
    assert main(looper_args(tmp_path, upstream.url, "--k", "2", "run.max_trial_tokens=2000", env=env)) == 0
    trials, summary = trials_of(tmp_path)
    # Harbor's table: what the agent did before the cap is graded and counts (here: nothing solved), as for a time limit
    assert [(t["status"], t["details"]["error_class"]) for t in trials] == [("failed", "SpendCapReached")] * 2
    for trial in trials:
        assert "spend cap reached" in trial["message"] and "run.max_trial_tokens is 2,000" in trial["message"], trial
        assert trial["usage"]["model_calls"] == 2  # the call that crossed the cap was the last one forwarded
        transcript = (tmp_path / "results" / "caps").glob(f"*/tasks/fix-median-bug/attempt-{trial['attempt']}/gateway_looper.jsonl")
        assert "stopped by SIGTERM" in next(transcript).read_text()  # stopped, not left to its time limit
    assert len(upstream.received) == 4
    assert (summary["failed"], summary["pass_at_1"], summary["complete"]) == (2, 0.0, True)  # counted, as failures


def test_a_runs_cap_stops_its_later_attempts(upstream, tmp_path, monkeypatch):
    from agentcompass.commands.cli import main

    monkeypatch.syspath_prepend(str(TESTS))
    assert main(looper_args(tmp_path, upstream.url, "--k", "3", "run.max_tokens=2000")) == 0
    trials, summary = trials_of(tmp_path)
    assert [(t["status"], t["details"]["error_class"]) for t in trials] == [("failed", "SpendCapReached")] * 3
    assert all("run.max_tokens is 2,000" in t["message"] for t in trials)
    assert ["not started" in t["message"] for t in trials] == [False, True, True]
    assert len(upstream.received) == 2 and summary["failed"] == 3


@pytest.mark.parametrize("harness, model, setting, says", [
    ("nop", "none", "run.max_cost_usd=5", "spend caps are enforced at the model gateway, which harness 'nop' does not use"),
    ("opencode", "openai/unpriced-model-x", "run.max_trial_cost_usd=1", "need the price of model"),
], ids=["harness-without-gateway", "unpriced-model"])
def test_a_cap_that_cannot_hold_is_refused_before_the_run(tmp_path, cli, harness, model, setting, says):
    done = cli("run", "demo", harness, model, setting, "--model-base-url", "http://127.0.0.1:9/v1", "--no-model-check",
               "--env-params", '{"isolation": "none"}', "--results-dir", str(tmp_path / "results"), cwd=tmp_path,
               env={"PYTHONPATH": os.pathsep.join([str(REPO), str(TESTS)]), "OPENAI_API_KEY": "sk-x"})
    assert done.returncode == 2 and says in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "results").exists()
