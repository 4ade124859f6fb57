"""The trial's side of the sandbox: unique names (issue 17.11) and close errors that never discard a grade (17.8)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


def test_sandbox_names_stay_unique_when_cut_or_cleaned():
    from agentcompass.core.trial import sandbox_name

    long_a, long_b = "r" * 119 + "a", "r" * 119 + "b"  # differ only past the 120-character cut
    names = {sandbox_name(long_a, "task", 1), sandbox_name(long_b, "task", 1),
             sandbox_name("run", "a/b", 1), sandbox_name("run", "a-b", 1)}
    assert len(names) == 4
    assert all(len(name) <= 120 and all(c.isalnum() or c in "_.-" for c in name) for name in names)
    assert sandbox_name("run", "fix-median-bug", 2) == "ac-run-fix-median-bug-2"  # a plain name stays readable
    assert sandbox_name("run", "tâche", 1) == "ac-run-tâche-1"  # letters beyond ASCII are letters too, as before


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
