"""A gcp sandbox over real SSH: commands as `docker exec` in the task container on the "VM" (a real sshd on
127.0.0.1, tests/gcp_vms.py), their timeouts and output cap, files as tar streams, close."""

from __future__ import annotations

import subprocess
import time

import pytest

from agentcompass.core.sandbox import TRUNCATION_MARK
from gcp_vms import calls, containers, provider, sandbox, spec, sshd  # noqa: F401  (fixtures)
from gcp_vms import fake as fake  # noqa: F401,PLC0414  (fixture)
from link_attacks import assert_download_follows_no_link


# -- exec and files over real SSH -------------------------------------------------------------------
def test_exec_runs_in_the_task_container(sandbox):
    result = sandbox.exec('echo "$GREETING from $(pwd)"; echo oops >&2; exit 3', env={"GREETING": "hi"}, cwd="/tmp")
    assert (result.exit_code, result.stdout, result.stderr, result.timed_out) == (3, "hi from /tmp\n", "oops\n", False)
    assert sandbox.exec("id -un", user="nobody").stdout == "nobody\n"
    inside = sandbox.exec("cat /proc/1/cgroup; hostname").stdout
    assert subprocess.run(["docker", "inspect", "-f", "{{.Config.Hostname}}", sandbox.id], capture_output=True,
                          text=True).stdout.strip() in inside


def test_exec_timeout_kills_the_command_and_what_it_forked(sandbox):
    started = time.monotonic()
    result = sandbox.exec("(sleep 8; touch /app/late) & echo started; sleep 300", timeout=1)
    assert (result.exit_code, result.timed_out, result.stdout) == (124, True, "started\n")
    assert time.monotonic() - started < 60  # cut at the timeout, not the command's 300 s
    time.sleep(8.5)  # the child had 7 s after the timeout to be killed: a starved machine still makes it
    assert sandbox.exec("test -e /app/late").exit_code == 1  # the background child died too
    assert sandbox.exec("ps -eo args | grep -c '[s]leep 300'").stdout.strip() == "0"


def test_exec_output_is_capped(fake, sshd):
    box = provider(sshd, output_cap_bytes=1000).open(spec())
    result = box.exec("head -c 100000 /dev/zero | tr '\\0' a")
    box.close()
    assert result.exit_code == 0 and result.stdout == "a" * 1000 + TRUNCATION_MARK


def test_upload_and_download_files_and_directories(sandbox, tmp_path):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "a.txt").write_text("alpha\n")
    (src / "run.sh").write_text("echo ran\n")
    (src / "run.sh").chmod(0o755)
    sandbox.upload(src, "/tests")
    sandbox.upload(src / "sub" / "a.txt", "/deep/new/b.txt")
    assert sandbox.exec("/tests/run.sh && cat /tests/sub/a.txt /deep/new/b.txt").stdout == "ran\nalpha\nalpha\n"
    sandbox.exec("mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt && head -c 3000000 /dev/urandom > /logs/verifier/big")
    sandbox.download("/logs/verifier", tmp_path / "verifier")
    sandbox.download("/deep/new/b.txt", tmp_path / "b.txt")
    assert (tmp_path / "verifier" / "reward.txt").read_text() == "1\n"
    assert (tmp_path / "verifier" / "big").stat().st_size == 3000000
    assert (tmp_path / "b.txt").read_text() == "alpha\n"
    with pytest.raises(FileNotFoundError):
        sandbox.download("/logs/agent/missing.json", tmp_path / "missing.json")


def test_a_download_follows_no_link_the_agent_made(sandbox, tmp_path):
    assert_download_follows_no_link(sandbox, tmp_path)


def test_close_deletes_the_vm_and_its_container_once(fake, sshd):
    box = provider(sshd).open(spec())
    assert containers() != []
    box.close()
    box.close()
    assert len(calls("InstancesClient.delete")) == 1 and containers() == []
    from agentcompass.core.errors import InfraError

    with pytest.raises(InfraError, match="closed"):
        box.exec("true")
