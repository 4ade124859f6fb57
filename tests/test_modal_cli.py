"""`agentcompass run|cleanup|config show --env modal` in a subprocess, `import modal` answered by the fake SDK
(tests/modal_sdk.py: modal_cli): a whole run, secrets kept out of files, errors retried or stopping the run,
pacing and back-pressure, a lost sandbox, Ctrl-C, cleanup."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

import fake_modal
from agentcompass.core.sandbox import SandboxSpec
from agentcompass.core.task import LIFETIME_MARGIN_S
from harbor_factory import make_recipe, make_task
from modal_sdk import SECRET, calls, modal_cli, needs_bwrap, private_config, provider, real_modal, spec  # noqa: F401  (fixtures)
from modal_sdk import fake as fake  # noqa: F401,PLC0414  (fixture)

pytestmark = needs_bwrap


def test_demo_end_to_end_on_fake_modal(modal_cli, tmp_path):
    results = tmp_path / "results"
    run, sdk = modal_cli("run", "demo", "oracle", "none", "--env", "modal", "--results-dir", str(results),
                         "--run-name", "m1", "--config", str(private_config(tmp_path)),
                         env={"MY_MODAL_SECRET": SECRET})
    assert run.returncode == 0, run.stderr
    [summary] = results.glob("m1/*/summary.json")
    data = json.loads(summary.read_text())
    assert data["passed"] == 6, data
    creates = [c for c in sdk if c["call"] == "Sandbox.create"]
    terminated = sorted(c["args"][0] for c in sdk if c["call"] == "Sandbox.terminate")
    assert len(creates) == 6
    assert len(terminated) == 6 and len(set(terminated)) == 6
    for create in creates:
        kwargs = create["kwargs"]
        assert kwargs["image"]["dockerfile"].endswith("environment/Dockerfile")
        assert kwargs["block_network"] is True  # the demo tasks disallow internet
        assert kwargs["tags"]["agentcompass"] == "1" and kwargs["tags"]["run"] == "m1"
        # No sandbox outlives its task: agent 300 s + verifier 60 s (every demo task.toml) + the margin.
        assert kwargs["workdir"] == "/app" and kwargs["timeout"] == 300 + 60 + LIFETIME_MARGIN_S
    assert {tuple(c["args"]) for c in sdk if c["call"] == "Client.from_credentials"} == {("ak-private", SECRET)}
    # The Dockerfiles build FROM the recipe's base (a public one by default; the tests' offline one here).
    builds = [c["kwargs"]["build_args"] for c in sdk if c["call"] == "Image.from_dockerfile"]
    assert builds == [{"BASE_IMAGE": "agentcompass/base:bookworm"}] * 6
    for path in results.rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), path


def test_config_show_redacts_the_tokens(modal_cli, tmp_path):
    show, _ = modal_cli("config", "show", "demo", "oracle", "none", "--env", "modal",
                        "--config", str(private_config(tmp_path)), env={"MY_MODAL_SECRET": SECRET})
    assert show.returncode == 0, show.stderr
    assert SECRET not in show.stdout and "ak-private" not in show.stdout
    assert "***" in show.stdout


def test_docs_names_and_aliases_through_the_cli(modal_cli, tmp_path):
    creds = {"MODAL_TOKEN_ID": "ak-x", "MODAL_TOKEN_SECRET": "as-x"}
    run, sdk = modal_cli("run", "demo", "oracle", "none", "--env", "modal", "--results-dir", str(tmp_path / "out"),
                         "--benchmark-params", '{"limit": 1}', "--env-params", '{"cpu": 4, "timeout": 3600}',
                         "environments.modal.memory_mb=2048", env=creds)
    assert run.returncode == 0, run.stderr
    [create] = [c["kwargs"] for c in sdk if c["call"] == "Sandbox.create"]
    assert (create["cpu"], create["memory"], create["timeout"]) == ([4.0, 4.0], [2048, 2048], 3600)
    show, _ = modal_cli("config", "show", "demo", "oracle", "none", "--env", "modal",
                        "--env-params", '{"cpus": 2, "idle_timeout_s": 60}', env=creds)
    assert show.returncode == 0, show.stderr
    env = show.stdout.split("\nenv:\n", 1)[1]
    assert "  cpu: 2" in env and "  idle_timeout: 60" in env  # the canonical spelling, whatever was typed
    assert "cpus" not in env and "idle_timeout_s" not in env


def test_an_error_no_retry_can_fix_stops_the_run_with_one_line(modal_cli, tmp_path):
    results = tmp_path / "out"
    run, sdk = modal_cli("run", "demo", "oracle", "none", "--env", "modal", "--results-dir", str(results),
                         "--run-name", "bad", "--task-concurrency", "1",
                         env={"MODAL_TOKEN_ID": "ak-x", "MODAL_TOKEN_SECRET": "as-x",
                              fake_modal.FAIL_ENV: "PermissionDeniedError"})
    assert run.returncode == 2, run.stderr
    assert "PermissionDeniedError" in run.stderr and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert count(sdk, "Sandbox.create") == 1  # not retried, and no other task tried
    trials = list(results.glob("bad/*/trials.jsonl"))
    assert not any(t.read_text().strip() for t in trials)  # nothing recorded: a rerun after the fix runs them
    [run_json] = results.glob("bad/*/run.json")
    assert json.loads(run_json.read_text())["status"] == "stopped"


def test_in_a_pooled_sweep_such_an_error_stops_its_job_alone(modal_cli, tmp_path):
    """--env local,modal pooled: modal's job stops at its first trial, local's runs to the end."""
    results = tmp_path / "out"
    run, sdk = modal_cli("run", "demo", "oracle", "none", "--env", "local,modal", "-m", "--sweep-parallel",
                         "--benchmark-params", '{"limit": 3}', "--results-dir", str(results), "--run-name", "pool",
                         "--task-concurrency", "1",
                         env={"MODAL_TOKEN_ID": "ak-x", "MODAL_TOKEN_SECRET": "as-x",
                              fake_modal.FAIL_ENV: "PermissionDeniedError"})
    assert run.returncode == 2, run.stderr
    errors = [line for line in run.stderr.splitlines() if not line.startswith("[")]  # beside local's progress lines
    assert len(errors) == 1 and errors[0].startswith("error: ") and "PermissionDeniedError" in errors[0], run.stderr
    assert count(sdk, "Sandbox.create") == 1  # modal's first trial, not retried; none of its other tasks tried
    local, modal = results / "pool" / "demo__oracle__none__local", results / "pool" / "demo__oracle__none__modal"
    assert json.loads((modal / "run.json").read_text())["status"] == "stopped"
    assert not (modal / "trials.jsonl").exists() or not (modal / "trials.jsonl").read_text().strip()
    assert json.loads((local / "run.json").read_text())["status"] == "completed"
    assert json.loads((local / "summary.json").read_text())["passed"] == 3


def test_a_transient_error_is_retried(modal_cli, tmp_path):
    results = tmp_path / "out"
    run, sdk = modal_cli("run", "demo", "oracle", "none", "--env", "modal", "--results-dir", str(results),
                         "--benchmark-params", '{"limit": 1}', "run.retry_backoff_s=0.1",
                         env={"MODAL_TOKEN_ID": "ak-x", "MODAL_TOKEN_SECRET": "as-x",
                              fake_modal.FAIL_ENV: "ServiceError:1"})
    assert run.returncode == 0, run.stderr
    [trial] = [json.loads(line) for line in next(results.glob("*/*/trials.jsonl")).read_text().splitlines()]
    assert (trial["status"], trial["retries"]) == ("passed", 1)


def test_resource_exhausted_is_back_pressure_not_a_retry(modal_cli, tmp_path):
    """Modal's rate or concurrency limit: the trial waits (with backoff, fewer sandboxes at once) and is not retried."""
    results = tmp_path / "out"
    run, sdk = modal_cli("run", "demo", "oracle", "none", "--env", "modal", "--results-dir", str(results),
                         "--benchmark-params", '{"limit": 1}',
                         env={"MODAL_TOKEN_ID": "ak-x", "MODAL_TOKEN_SECRET": "as-x",
                              fake_modal.FAIL_ENV: "ResourceExhaustedError:1"})
    assert run.returncode == 0, run.stderr
    [trial] = [json.loads(line) for line in next(results.glob("*/*/trials.jsonl")).read_text().splitlines()]
    assert (trial["status"], trial["retries"]) == ("passed", 0) and trial["timings"]["wait"] >= 2
    assert "back-pressure: at most 1 sandbox(es) open at once" in run.stderr


def test_the_grading_request_of_swebench_is_cpu_4_as_modal_eval_asks(fake):
    """swebench's run_evaluation_modal.py creates its sandbox with cpu=4 (a request, no limit): the fresh
    grading spec's cpu_request of 8 vCPUs is those 4 Modal cores."""
    from agentcompass.formats.swebench.format import OFFICIAL_MODAL_GRADING_VCPUS

    provider().open(spec("grade", cpu_request=OFFICIAL_MODAL_GRADING_VCPUS)).close()
    [(_, _, create)] = calls("Sandbox.create")
    assert create["cpu"] == 4 and not isinstance(create["cpu"], tuple)


def test_env_open_qps_paces_sandbox_creation(modal_cli, tmp_path):
    from test_pacing import assert_rate

    run, sdk = modal_cli("run", "demo", "oracle", "none", "--env", "modal", "--results-dir", str(tmp_path / "out"),
                         "--k", "4", "--task-concurrency", "8", "--env-open-qps", "2",
                         env={"MODAL_TOKEN_ID": "ak-x", "MODAL_TOKEN_SECRET": "as-x"})
    assert run.returncode == 0, run.stderr
    created = sorted(c["t"] for c in sdk if c["call"] == "Sandbox.create")
    assert len(created) == 24
    assert_rate(created, 2, 2)
    trials = [json.loads(line) for line in next((tmp_path / "out").glob("*/*/trials.jsonl")).read_text().splitlines()]
    waited = [t for t in trials if t["timings"].get("wait", 0) > 1]
    assert waited and all(t["timings"]["total"] < t["timings"]["wait"] + 30 for t in waited)
    assert all(t["timings"]["total"] < 30 for t in trials)  # the wait is not the trial's time


def test_provider_limit_caps_open_sandboxes(modal_cli, tmp_path):
    run, sdk = modal_cli("run", "demo", "oracle", "none", "--env", "modal", "--results-dir", str(tmp_path / "out"),
                         "--k", "3", "--task-concurrency", "8", "--provider-limit", "3", "run.env_open_qps=100",
                         env={"MODAL_TOKEN_ID": "ak-x", "MODAL_TOKEN_SECRET": "as-x"})
    assert run.returncode == 0, run.stderr
    open_now = most = 0
    for call in sdk:  # in the order the fake recorded them
        open_now += {"Sandbox.create": 1, "Sandbox.terminate": -1}.get(call["call"], 0)
        most = max(most, open_now)
    assert most == 3 and count(sdk, "Sandbox.create") == 18


def test_missing_credentials_exit_2_with_one_line(modal_cli, tmp_path):
    run, sdk = modal_cli("run", "demo", "oracle", "none", "--env", "modal", "--results-dir", str(tmp_path / "out"))
    assert run.returncode == 2
    assert len(run.stderr.strip().splitlines()) == 1
    assert "MODAL_TOKEN_ID" in run.stderr
    assert not (tmp_path / "out").exists()
    assert sdk == []


@pytest.fixture
def slow_bench(tmp_path) -> Path:
    dataset, config_dir = tmp_path / "data", tmp_path / "conf"
    for i in range(3):
        make_task(dataset, f"slow-{i}", solve="sleep 60", test="echo 1 > /logs/verifier/reward.txt",
                  dockerfile="FROM scratch\nWORKDIR /app\n", agent_timeout=30)
    make_task(dataset, "quick", solve="sleep 60", test="echo 1 > /logs/verifier/reward.txt",
              dockerfile="FROM scratch\nWORKDIR /app\n", agent_timeout=1)
    make_recipe(config_dir, "slowbench", dataset, runs_on_host=False)
    return config_dir


def test_a_sandbox_lost_in_the_agent_or_the_verifier_phase_is_retried(modal_cli, tmp_path):
    dataset, config_dir = tmp_path / "data", tmp_path / "conf"
    make_task(dataset, "t1", solve="sleep 2; echo ok > /app/answer.txt",
              test="sleep 2; grep -q ok /app/answer.txt && echo 1 > /logs/verifier/reward.txt",
              dockerfile="FROM scratch\nWORKDIR /app\n")
    make_recipe(config_dir, "lossbench", dataset, runs_on_host=False)
    results = tmp_path / "out"
    run, sdk = modal_cli("run", "lossbench", "oracle", "none", "--env", "modal", "--config-dir", str(config_dir),
                         "--results-dir", str(results), "--run-name", "loss", "run.retry_backoff_s=0.1",
                         env={"MODAL_TOKEN_ID": "ak-x", "MODAL_TOKEN_SECRET": "as-x",
                              fake_modal.LOSE_ENV: "solve.sh,tests/test.sh"})
    assert run.returncode == 0, run.stderr
    (trial,) = [json.loads(line) for line in next(results.glob("loss/*/trials.jsonl")).read_text().splitlines()]
    # Lost under solve.sh (agent), then under test.sh (verifier): two retries, then a pass.
    assert (trial["status"], trial["retries"]) == ("passed", 2), trial
    # Three sandboxes, each terminated (a create that found the name still held by the ending one retried).
    assert len({c["args"][0] for c in sdk if c["call"] == "Sandbox.exec"}) == 3 and count(sdk, "Sandbox.terminate") == 3


def count(sdk: list[dict], name: str) -> int:
    return sum(1 for c in sdk if c["call"] == name)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupt_terminates_every_sandbox(modal_cli, slow_bench, tmp_path, sig):
    log = Path(modal_cli.env[fake_modal.LOG_ENV])
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentcompass", "run", "slowbench", "oracle", "none", "--env", "modal",
         "--config-dir", str(slow_bench), "--results-dir", str(tmp_path / "out"), "--run-name", f"int-{uuid.uuid4().hex[:6]}",
         "--task-concurrency", "4", "--env-params", '{"token_id": "ak-x", "token_secret": "as-x"}'],
        env={**os.environ, **modal_cli.env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Wait until the agent timed out in `quick` (a trial error) and the slow ones are running.
    assert fake_modal.wait_until(lambda: log.exists() and log.read_text().count('"Sandbox.create"') == 4
                                 and log.read_text().count('"Sandbox.terminate"') >= 1, timeout=90), proc.poll()  # a loaded CI machine starts four sandboxes slowly
    time.sleep(0.5)  # the slow trials are inside their agents
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    sdk = [json.loads(line) for line in log.read_text().splitlines()]
    terminated = [c["args"][0] for c in sdk if c["call"] == "Sandbox.terminate"]
    assert count(sdk, "Sandbox.create") == 4
    assert len(terminated) == 4 and len(set(terminated)) == 4


def test_cleanup_terminates_tagged_sandboxes(fake):
    from agentcompass.providers.modal.provider import ModalProvider

    p = provider()
    p.open(spec("a"))
    p.open(SandboxSpec(name="b", image="x", labels={"agentcompass": "1", "run": "other"}))
    assert ModalProvider(token_id="ak-test", token_secret=SECRET).cleanup("r") == 1
    assert [s.name for s in fake_modal.Sandbox.running.values()] == ["b"]
    assert calls("Sandbox.list")[-1][2]["tags"] == {"agentcompass": "1", "run": "r"}


def test_cleanup_command_lists_by_run_tag(modal_cli):
    run, sdk = modal_cli("cleanup", "--env", "modal", "--run-name", "gone", env={"MODAL_TOKEN_ID": "ak-x", "MODAL_TOKEN_SECRET": "as-x"})
    assert run.returncode == 0, run.stderr
    assert "removed 0 modal sandbox(es) of run 'gone'" in run.stdout
    [listed] = [c for c in sdk if c["call"] == "Sandbox.list"]
    assert listed["kwargs"]["tags"] == {"agentcompass": "1", "run": "gone"}


def test_cleanup_takes_credentials_from_a_private_config(modal_cli, tmp_path):
    run, sdk = modal_cli("cleanup", "--env", "modal", "--config", str(private_config(tmp_path)),
                         env={"MY_MODAL_SECRET": SECRET})
    assert run.returncode == 0, run.stderr
    assert {tuple(c["args"]) for c in sdk if c["call"] == "Client.from_credentials"} == {("ak-private", SECRET)}
    assert SECRET not in run.stdout + run.stderr
