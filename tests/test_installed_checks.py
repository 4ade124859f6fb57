"""Before an installed CLI's run: every cheap check first, the big download last. A refused run fetches nothing
(the README's first opencode example downloaded 65 MB, then was refused; claude_code without a key 191 MB), and a
model or tier the pinned CLI does not know is one line."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from conftest import run_cli

FAKE_NPM = """#!/bin/sh
echo "$@" >> "{log}"
sleep 30
"""


@pytest.fixture
def watched_npm(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """An `npm` first on PATH that records being asked (and would take 30 s): the run's env, its log."""
    folder, log = tmp_path / "bin", tmp_path / "npm-calls.txt"
    folder.mkdir()
    (folder / "npm").write_text(FAKE_NPM.format(log=log))
    (folder / "npm").chmod(0o755)
    env = {"PATH": f"{folder}{os.pathsep}{os.environ['PATH']}", "AGENTCOMPASS_CACHE_DIR": str(tmp_path / "cache"),
           "HOME": str(tmp_path)}
    return env, log


def refused(proc, tmp_path: Path, says: str, log: Path, started: float) -> None:
    took = time.monotonic() - started
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert len(proc.stderr.strip().splitlines()) == 1 and says in proc.stderr, proc.stderr
    assert not log.exists(), f"npm was asked before the refusal ({took:.1f} s): {log.read_text()}"
    assert not (tmp_path / "cache" / "cli-agents").exists() and not (tmp_path / "results").exists()


def test_claude_code_without_a_key_is_refused_before_any_download(tmp_path, watched_npm):
    env, log = watched_npm
    started = time.monotonic()
    proc = run_cli("run", "demo", "claude_code", "claude-sonnet-4-5", "--env", "local",
                   "--env-params", json.dumps({"isolation": "none"}), "--results-dir", str(tmp_path / "results"),
                   cwd=tmp_path, env={**env, "ANTHROPIC_API_KEY": ""})
    refused(proc, tmp_path, "no API key", log, started)


@pytest.mark.parametrize(("args", "says"), [
    (["codex", "gpt-5"], "harness 'codex' (@openai/codex 0.171.0) does not know model 'gpt-5'"),
    (["codex", "gpt-5-mini"], "does not know model 'gpt-5-mini'"),
    (["codex", "gpt-5.5", "model.reasoning=minimal"], "is not one of this model's tiers"),
    (["codex", "gpt-5.5", "model.reasoning_map.minimal={reasoning_effort: minimal}", "model.reasoning=minimal"],
     "does not know tier 'minimal' of model 'gpt-5.5'"),
    (["claude_code", "anthropic/claude-3-haiku-20240307", "model.api=anthropic"],
     "harness 'claude_code' (@anthropic-ai/claude-code 2.1.332) does not know model 'claude-3-haiku-20240307'"),
], ids=["codex-gpt-5", "codex-gpt-5-mini", "codex-minimal-not-a-tier", "codex-minimal", "claude-code-unknown"])
def test_a_model_or_tier_the_pinned_cli_does_not_know_is_refused_in_one_line(args, says, tmp_path, watched_npm):
    """codex 0.171.0 lists neither gpt-5 nor gpt-5-mini, nor a `minimal` effort for any model (which OpenAI
    refuses beside codex's web_search tool)."""
    env, log = watched_npm
    started = time.monotonic()
    proc = run_cli("run", "demo", *args, "--env", "local", "--results-dir", str(tmp_path / "results"), cwd=tmp_path,
                   env={**env, "OPENAI_API_KEY": "sk-t", "ANTHROPIC_API_KEY": "sk-t"})
    refused(proc, tmp_path, says, log, started)
    assert "Traceback" not in proc.stderr
