"""A plain (non-editable) `pip install .` works from any directory: the YAML ships in the wheel."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import make_venv

REPO = Path(__file__).resolve().parent.parent


def test_wheel_install_runs_the_demo_from_another_directory(tmp_path):
    clean_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the wheel's code, not a checkout's
    wheels = tmp_path / "wheels"
    # hatchling comes with the test extra: no build-time download, so no flake from the network.
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", str(REPO),
                            "-w", str(wheels)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    (wheel,) = wheels.glob("agentcompass_runner-*.whl")  # the distribution's name (pyproject), wheel-normalized
    venv = tmp_path / "venv"
    python = make_venv(venv)  # the dependencies come from this environment, agentcompass from the wheel
    installed = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel)],
                               capture_output=True, text=True, env=clean_env)
    assert installed.returncode == 0, installed.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = subprocess.run([str(python), "-c", "import agentcompass; print(agentcompass.__file__)"],
                           cwd=elsewhere, capture_output=True, text=True, env=clean_env).stdout
    assert str(venv) in where, where  # not the checkout
    listed = subprocess.run([str(venv / "bin" / "agentcompass"), "list"], cwd=elsewhere, capture_output=True, text=True,
                            env=clean_env)
    assert listed.returncode == 0 and "demo" in listed.stdout and "oracle" in listed.stdout, listed.stderr
    run = subprocess.run([str(venv / "bin" / "agentcompass"), "run", "demo", "oracle", "none", "--run-name", "w"],
                         cwd=elsewhere, capture_output=True, text=True, timeout=300, env=clean_env)
    assert run.returncode == 0, run.stderr
    summary = json.loads((elsewhere / "results" / "w" / "demo__oracle__none__local" / "summary.json").read_text())
    trials = (elsewhere / "results" / "w" / "demo__oracle__none__local" / "trials.jsonl").read_text()
    assert summary["passed"] == summary["tasks"] >= 5, trials
