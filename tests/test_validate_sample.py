"""`validate --sample N --seed S`: a seeded draw of N tasks, and the one summary line docs/datasets.md keeps."""

from __future__ import annotations

import re

from conftest import run_cli


def test_a_sample_is_drawn_with_its_seed_and_summarised_in_one_line(tmp_path):
    args = ("validate", "demo", "--env", "local", "--sample", "2", "--seed", "5", "--results-dir", str(tmp_path))
    first = run_cli(*args, "--run-name", "a")
    assert first.returncode == 0, first.stderr
    line = re.search(r"^validated demo on local, a sample of 2 \(seed 5\): oracle passed 2/2, nop failed 2/2, "
                     r"\d{4}-\d{2}-\d{2}$", first.stdout, re.M)
    assert line, first.stdout
    listed = run_cli("list", "tasks", "demo", "--benchmark-params", '{"limit": 2, "shuffle": true, "seed": 5}')
    drawn = [row.split()[0] for row in first.stdout.splitlines()[1:3]]
    assert drawn == listed.stdout.split()[:2]  # the formats' own seeded selection, as `list tasks` shows it


def test_sample_and_a_limit_of_ones_own_is_one_line(tmp_path):
    proc = run_cli("validate", "demo", "--sample", "2", "--benchmark-params", '{"limit": 3}', "--results-dir", str(tmp_path))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "drop limit from --benchmark-params" in proc.stderr and not any(tmp_path.iterdir())
