"""`agentcompass validate`: the oracle must pass and nop must fail on every task."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parent / "data"


def host_overlay(tmp_path: Path) -> Path:
    path = tmp_path / "host.yaml"
    path.write_text(f"benchmark:\n  runs_on_host: true\n  env: {{PYTHON: {sys.executable}}}\n")
    return path


def table(stdout: str) -> dict[str, str]:
    """Task -> its verdict column, from the printed table (not its summary line, `validated ...`, nor `results:`)."""
    rows = [line.split(None, 3) for line in stdout.splitlines()[1:]
            if line and not line.startswith(("results:", "validated "))]
    return {row[0]: row[3] for row in rows}


def broken_copy(source: Path, tmp_path: Path, task: str, relative: str, script: str) -> Path:
    """A copy of a fixture dataset whose `task` has a reference solution that does the wrong thing."""
    target = tmp_path / "dataset"
    shutil.copytree(source, target)
    (target / task / relative).write_text(script)
    return target


def test_validate_demo_on_local(cli, tmp_path: Path) -> None:
    done = cli("validate", "demo", "--env", "local", "--results-dir", str(tmp_path), "--run-name", "v")
    assert done.returncode == 0, done.stdout + done.stderr
    verdicts = table(done.stdout)
    assert len(verdicts) == 6 and set(verdicts.values()) == {"ok"}, done.stdout
    # Two ordinary runs, side by side under the run name.
    for harness, passed in (("oracle", 6), ("nop", 0)):
        summary = json.loads((tmp_path / "v" / f"demo__{harness}__none__local" / "summary.json").read_text())
        assert (summary["tasks"], summary["passed"]) == (6, passed)


def test_validate_terminal_bench_on_local(cli, tmp_path: Path) -> None:
    done = cli("validate", "terminal_bench", "--config", str(host_overlay(tmp_path)),
               "--benchmark-params", json.dumps({"path": str(DATA / "terminal_bench"), "sample_ids": ["greeting-file"]}),
               "--results-dir", str(tmp_path), "--run-name", "v")
    assert done.returncode == 0, done.stdout + done.stderr
    assert table(done.stdout) == {"greeting-file": "ok"}


def test_validate_names_the_task_whose_solution_is_broken(cli, tmp_path: Path) -> None:
    dataset = broken_copy(DATA / "terminal_bench", tmp_path, "greeting-file", "solution.sh",
                          "#!/bin/bash\necho 'goodbye, world' > /app/greeting.txt\n")
    done = cli("validate", "terminal_bench", "--config", str(host_overlay(tmp_path)),
               "--benchmark-params", json.dumps({"path": str(dataset), "sample_ids": ["greeting-file"]}),
               "--results-dir", str(tmp_path), "--run-name", "v")
    assert done.returncode == 1, done.stdout + done.stderr
    assert table(done.stdout)["greeting-file"].startswith("BROKEN: oracle failed (1/2 tests passed")
    assert "break the rule" in done.stderr and "greeting-file" in done.stderr.splitlines()[-1]


def test_validate_flags_a_task_that_passes_without_work(cli, tmp_path: Path) -> None:
    dataset = broken_copy(DATA / "terminal_bench_2", tmp_path, "sum-numbers", "tests/test.sh",
                          "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    done = cli("validate", "terminal_bench_2", "--config", str(host_overlay(tmp_path)),
               "--benchmark-params", json.dumps({"path": str(dataset)}),
               "--results-dir", str(tmp_path), "--run-name", "v")
    assert done.returncode == 1, done.stdout + done.stderr
    assert table(done.stdout)["sum-numbers"] == "BROKEN: nop passed: the tests pass without any work"


def test_validate_bad_input_is_a_user_error_and_writes_nothing(cli, tmp_path: Path) -> None:
    done = cli("validate", "no_such_bench", "--results-dir", str(tmp_path))
    assert done.returncode == 2 and "unknown benchmark 'no_such_bench'" in done.stderr
    done = cli("validate", "demo", "--benchmark-params", '{"sample_ids": ["nope"]}', "--results-dir", str(tmp_path))
    assert done.returncode == 2 and "unknown sample_ids: 'nope'" in done.stderr
    assert not any(tmp_path.iterdir())


@pytest.mark.docker
@pytest.mark.parametrize("bench", ["terminal_bench", "terminal_bench_2"])
def test_validate_on_docker(cli, base_image: str, tmp_path: Path, bench: str) -> None:
    done = cli("validate", bench, "--env", "docker", "--benchmark-params", json.dumps({"path": str(DATA / bench)}),
               "--results-dir", str(tmp_path), "--run-name", "v", timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    expected = ["count-lines", "greeting-file"] if bench == "terminal_bench" else ["sum-numbers"]
    assert table(done.stdout) == {task: "ok" for task in expected}


@pytest.mark.docker
def test_validate_on_docker_names_a_broken_solution(cli, base_image: str, tmp_path: Path) -> None:
    dataset = broken_copy(DATA / "terminal_bench_2", tmp_path, "sum-numbers", "solution/solve.sh",
                          "#!/bin/bash\necho 'print(0)' > /app/sum.py\n")
    done = cli("validate", "terminal_bench_2", "--env", "docker", "--benchmark-params", json.dumps({"path": str(dataset)}),
               "--results-dir", str(tmp_path), "--run-name", "v", timeout=900)
    assert done.returncode == 1, done.stdout + done.stderr
    assert table(done.stdout)["sum-numbers"].startswith("BROKEN: oracle failed")
    assert "sum-numbers" in done.stderr.splitlines()[-1]
