"""Issue 17.8: a failed close never discards a graded result."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


@pytest.mark.parametrize("max_retries", ["0", "2"])
def test_a_close_that_fails_after_grading_keeps_the_grade(cli, tmp_path, max_retries):
    config_dir = tmp_path / "conf"
    (config_dir / "providers").mkdir(parents=True)
    (config_dir / "providers" / "closefails.yaml").write_text(
        "name: closefails\nimpl: close_fails:CloseFailsProvider\ndescription: local, but close raises\n"
        "isolation: none\nroot: null\n")
    run = cli("run", "demo", "oracle", "none", "--env", "closefails", "--config-dir", str(config_dir),
              "--results-dir", str(tmp_path / "out"), "--run-name", "c", "--max-retries", max_retries,
              env={"PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])})
    assert run.returncode == 0, run.stderr
    trials = [json.loads(line) for line in next((tmp_path / "out" / "c").glob("*/trials.jsonl")).read_text().splitlines()]
    assert len(trials) == 6
    assert {(t["status"], t["retries"]) for t in trials} == {("passed", 0)}, trials
    assert run.stderr.count("closing the sandbox failed; the grade stands") == 6  # logged, never silent
    assert "the engine said no" in run.stderr
