"""Terminal-Bench's agent shell: mini_swe_agent's commands typed into the trial's tmux login shell, as
officially, so what one command changes (cwd, exports) the next and the same-shell tests see."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from conftest import run_cli
from fake_llm_server import FakeLLM, FakeLLMServer
from mini_demo import API_KEY, isolated_env, read_trials, run_dir

TASK = "same-shell"
# What the agent does: move and export, look around, run a command past its timeout, check the shell.
COMMANDS = [
    "mkdir -p /app/sub && cd /app/sub && export SECRET_WORD=xyzzy",
    'pwd; shopt -q login_shell && echo login-shell; echo "PATH=$PATH"; echo "bashrc=$FROM_BASHRC"; stty size < /dev/tty',
    "sh -c 'echo $$ > /tmp/sleeper.pid; exec sleep 300'",
    'if kill -0 "$(cat /tmp/sleeper.pid)" 2>/dev/null; then echo sleeper-alive; else echo sleeper-gone; fi; echo "in $PWD"',
    "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT",
]
COMMAND_TIMEOUT_S = 3
CUSTOM_PATH = "/opt/custom/bin"  # set by the image (or the recipe), reset by /etc/profile in a login shell
RUN_TESTS = """#!/bin/bash
echo "SWEBench results starts here"
if [ "$SECRET_WORD" = xyzzy ] && [ "$PWD" = /app/sub ]; then echo PASSED; else echo FAILED; fi
echo "SWEBench results ends here"
"""
IMAGE = f"""FROM {{base}}
RUN apt-get update && apt-get install -y --no-install-recommends tmux && rm -rf /var/lib/apt/lists/*
RUN echo 'export FROM_BASHRC=yes' >> /root/.bashrc
ENV PATH={CUSTOM_PATH}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
WORKDIR /app
"""


def write_dataset(root: Path, base_image: str) -> Path:
    task = root / "data" / TASK
    (task / "tests").mkdir(parents=True)
    (task / "task.yaml").write_text("instruction: export SECRET_WORD\nparser_name: swebench\nrun_tests_in_same_shell: true\n")
    (task / "Dockerfile").write_text(IMAGE.format(base=base_image))
    (task / "run-tests.sh").write_text(RUN_TESTS)
    return task.parent


def run_agent(tmp: Path, env: str, agent_shell: str) -> tuple[dict, list[str]]:
    """One mini_swe_agent trial against the scripted endpoint: its row and what each command printed."""
    dataset = write_dataset(tmp, "agentcompass/base:bookworm")
    overlay = tmp / "overlay.yaml"  # on the host: the recipe's PATH stands for the image's
    overlay.write_text(f"benchmark:\n  runs_on_host: true\n  env: {{PATH: '{CUSTOM_PATH}:/usr/bin:/bin'}}\n")
    llm = FakeLLM(COMMANDS)
    params = {} if agent_shell == "tmux" else {"agent_shell": agent_shell}  # tmux is the default
    with FakeLLMServer(llm) as server:
        done = run_cli("run", "terminal_bench", "mini_swe_agent", "glm-5.2", "--env", env,
                       *(["--config", str(overlay)] if env == "local" else []),
                       "--model-base-url", server.base_url, "--model-api-key", API_KEY,
                       "--harness-params", json.dumps({"command_timeout_s": COMMAND_TIMEOUT_S}),
                       "--benchmark-params", json.dumps({"path": str(dataset), **params}),
                       "--results-dir", str(tmp / "results"), "--run-name", f"shell-{uuid.uuid4().hex[:8]}",
                       cwd=tmp, env=isolated_env(tmp), timeout=900)
    assert done.returncode == 0, done.stderr
    [row] = read_trials(run_dir(tmp / "results"))
    # The observation of command i is the last message of request i + 1.
    outputs = [json.dumps(r.body["messages"][-1]) for r in llm.successes[1:]]
    return row, outputs


def check_the_shell_persists(row: dict, outputs: list[str], env: str) -> None:
    assert row["agent_exit_status"] == "submitted", row
    looked = outputs[1]
    assert "/app/sub" in looked and "login-shell" in looked and "40 160" in looked, looked
    assert CUSTOM_PATH not in looked and "/usr/bin" in looked, looked  # /etc/profile's PATH
    if env == "docker":
        assert "bashrc=yes" in looked, looked
    assert "timed out" in outputs[2], outputs[2]
    assert "sleeper-gone" in outputs[3] and "/app/sub" in outputs[3], outputs[3]
    # The tests were typed into the agent's shell: its cwd and its export.
    assert row["status"] == "passed", row


@pytest.mark.parametrize("env", ["local", pytest.param("docker", marks=pytest.mark.docker)])
def test_an_agents_commands_share_one_login_shell_with_the_tests(request, tmp_path: Path, env: str) -> None:
    if env == "docker":
        request.getfixturevalue("base_image")
    row, outputs = run_agent(tmp_path, env, "tmux")
    check_the_shell_persists(row, outputs, env)


def test_agent_shell_bash_runs_each_command_apart(tmp_path: Path) -> None:
    row, outputs = run_agent(tmp_path, "local", "bash")
    assert "/app/sub" not in outputs[1] and "login-shell" not in outputs[1], outputs[1]
    assert row["status"] == "failed", row  # the tests see neither the agent's cwd nor its export


def test_agent_shell_is_checked_before_the_run(tmp_path: Path) -> None:
    done = run_cli("run", "terminal_bench", "nop", "none", "--benchmark-params",
                   json.dumps({"path": str(tmp_path), "agent_shell": "zsh"}), "--results-dir", str(tmp_path / "r"))
    assert done.returncode == 2 and "agent_shell" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "r").exists()



def test_the_shell_survives_exit_and_takes_long_commands(tmp_path: Path) -> None:
    """Straight on a local sandbox: `exit` gets a new login shell; a script too long for one exec's
    argument is uploaded; a harness's env is exported in the shell and stays."""
    from agentcompass.formats.terminal_bench.shell import INLINE_MAX_BYTES, AgentShell
    from agentcompass.providers.local.provider import LocalProvider
    from agentcompass.core.sandbox import SandboxSpec

    sandbox = LocalProvider(root=str(tmp_path)).open(SandboxSpec(name="shell", workdir="/app", runs_on_host=True))
    try:
        shell = AgentShell.open(sandbox)
        assert shell.exec("cd /tmp && exit 3", timeout=30).exit_code != 0
        assert shell.exec("pwd", timeout=30).stdout == "/app\n"  # a new login shell, in the working directory
        payload = "y" * (2 * INLINE_MAX_BYTES)
        long = shell.exec(f"cat > /app/big <<'END'\n{payload}\nEND\nwc -c < /app/big", env={"KEPT": "1"}, timeout=30)
        assert (long.exit_code, long.stdout) == (0, f"{len(payload) + 1}\n")
        assert shell.exec("echo $KEPT", timeout=30).stdout == "1\n"
    finally:
        sandbox.close()
