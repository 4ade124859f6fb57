"""What the mini_swe_agent test modules share: the demo task's scripted fix, a user's config dir and environment
kept apart from this machine's, and a demo run against a scripted endpoint."""

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
