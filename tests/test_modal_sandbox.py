"""A Modal sandbox through the fake SDK (tests/modal_sdk.py): exec (an over-long command, a broken stream, a
sandbox that ends mid-command, timeouts, the output cap), files both ways, and how long the sandbox may live."""

from __future__ import annotations

import threading
import time

import pytest

import fake_modal
from agentcompass.core.errors import InfraError, SandboxLost
from agentcompass.core.sandbox import TRUNCATION_MARK
from agentcompass.core.task import LIFETIME_MARGIN_S, Task
from modal_sdk import calls, needs_bwrap, provider, real_modal, sandbox, spec  # noqa: F401  (fixtures)
from modal_sdk import fake as fake  # noqa: F401,PLC0414  (fixture)
from link_attacks import assert_download_follows_no_link

pytestmark = needs_bwrap


def test_a_command_longer_than_modals_argv_limit_runs_from_a_file(sandbox):
    payload = "x" * 100_000
    result = sandbox.exec(f"echo {payload} | wc -c")
    assert (result.exit_code, result.stdout.strip()) == (0, str(len(payload) + 1))


def test_a_broken_output_stream_is_no_result(sandbox, monkeypatch):
    class Broken:
        def __iter__(self):
            yield b"partial"
            raise fake_modal.exception.ConnectionError("stream reset")

    real_exec = sandbox.sandbox.exec

    def exec_with_broken_stdout(*args, **kwargs):
        process = real_exec(*args, **kwargs)
        process.stdout = Broken()
        return process

    monkeypatch.setattr(sandbox.sandbox, "exec", exec_with_broken_stdout)
    with pytest.raises(InfraError, match="broke off"):
        sandbox.exec("echo whole")


# -- a lost sandbox -------------------------------------------------------------------------------
def test_a_sandbox_ended_mid_command_is_sandbox_lost(sandbox, tmp_path):
    threading.Timer(0.5, sandbox.sandbox._end).start()  # Modal ends it: preempted, out of memory, ...
    with pytest.raises(SandboxLost, match="ended"):
        sandbox.exec("sleep 30")
    (tmp_path / "f.txt").write_text("x")
    for call in (lambda: sandbox.exec("true"), lambda: sandbox.upload(tmp_path / "f.txt", "/app/f.txt"),
                 lambda: sandbox.download("/app", tmp_path / "back")):
        with pytest.raises(SandboxLost):
            call()


def test_a_command_killed_in_a_live_sandbox_keeps_its_exit_code(sandbox):
    result = sandbox.exec("kill -9 $$")
    assert result.exit_code == 137 and not result.timed_out  # the command's own fate: the agent's, not infra
    assert sandbox.exec("echo alive").stdout == "alive\n"


# -- exec and files -------------------------------------------------------------------------------
def test_exec_runs_in_the_sandbox(sandbox):
    result = sandbox.exec('echo "$GREETING from $(pwd)"; echo oops >&2; exit 3', env={"GREETING": "hi"}, cwd="/tmp")
    assert (result.exit_code, result.stdout, result.stderr, result.timed_out) == (3, "hi from /tmp\n", "oops\n", False)


def test_exec_timeout_kills_the_command_and_what_it_forked(sandbox):
    started = time.monotonic()
    result = sandbox.exec("(sleep 8; touch /app/late) & echo started; sleep 300", timeout=1)
    assert (result.exit_code, result.timed_out, result.stdout) == (124, True, "started\n")
    assert time.monotonic() - started < 60  # cut at the timeout, not the command's 300 s
    time.sleep(8.5)  # the child had 7 s after the timeout to be killed: a starved machine still makes it
    assert sandbox.exec("test -e /app/late").exit_code == 1  # the background child died too


def test_exec_output_is_capped(fake):
    box = provider(output_cap_bytes=1000).open(spec())
    result = box.exec("head -c 100000 /dev/zero | tr '\\0' a")
    box.close()
    assert result.exit_code == 0
    assert result.stdout == "a" * 1000 + TRUNCATION_MARK


def test_upload_and_download_files_and_directories(sandbox, tmp_path):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "a.txt").write_text("alpha\n")
    (src / "run.sh").write_text("echo ran\n")
    (src / "run.sh").chmod(0o755)
    sandbox.upload(src, "/tests")
    sandbox.upload(src / "sub" / "a.txt", "/deep/new/b.txt")
    assert sandbox.exec("/tests/run.sh && cat /tests/sub/a.txt /deep/new/b.txt").stdout == "ran\nalpha\nalpha\n"
    sandbox.exec("mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt")
    sandbox.download("/logs/verifier", tmp_path / "verifier")
    sandbox.download("/deep/new/b.txt", tmp_path / "b.txt")
    assert (tmp_path / "verifier" / "reward.txt").read_text() == "1\n"
    assert (tmp_path / "b.txt").read_text() == "alpha\n"
    with pytest.raises(FileNotFoundError):
        sandbox.download("/logs/agent/missing.json", tmp_path / "missing.json")


def test_a_download_follows_no_link_the_agent_made(sandbox, tmp_path):
    assert_download_follows_no_link(sandbox, tmp_path)


# -- the sandbox's lifetime ------------------------------------------------------------------------
def test_without_a_lifetime_the_sandbox_still_has_a_hard_cap(fake):
    provider().open(spec()).close()
    [(_, _, create)] = calls("Sandbox.create")
    assert 0 < create["timeout"] <= 24 * 3600


def test_sandbox_lifetime_defaults_to_the_tasks_timeouts_plus_a_margin():

    task = Task(id="t", instruction="", agent_timeout_s=900, verify_timeout_s=300, build_timeout_s=None)
    assert task.sandbox_spec("n", {}, None).lifetime_s == 900 + 300 + LIFETIME_MARGIN_S
    assert Task(id="u", instruction="").sandbox_spec("n", {}, None).lifetime_s is None
    # A harness limit longer than the task's agent timeout (mini_swe_agent's wall_time_limit_s) extends it.
    assert task.sandbox_spec("n", {}, None, 3600).lifetime_s == 3600 + 300 + LIFETIME_MARGIN_S
    assert task.sandbox_spec("n", {}, None, 60).lifetime_s == 900 + 300 + LIFETIME_MARGIN_S


def test_the_trial_gives_the_sandbox_the_harness_time_limit(tmp_path):
    from agentcompass.harnesses.mini_swe_agent import MiniSweAgentHarness
    from agentcompass.core.trial import OpenSandboxes, TrialRunner

    class Refuse:
        specs: list = []

        def open(self, spec):
            self.specs.append(spec)
            raise InfraError("stop here")

    harness = MiniSweAgentHarness(wall_time_limit_s=5000)
    provider = Refuse()
    runner = TrialRunner(None, harness, provider, None, "r", {}, OpenSandboxes())
    with pytest.raises(InfraError):
        runner.run(Task(id="t", instruction="", agent_timeout_s=600, verify_timeout_s=60), 1, tmp_path)
    assert provider.specs[0].lifetime_s == 5000 + 60 + LIFETIME_MARGIN_S
