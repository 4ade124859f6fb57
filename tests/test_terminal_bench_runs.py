"""Terminal-Bench runs on the host (the local provider), and Terminal-Bench 2 from a git source."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from terminal_bench_tasks import DATA, HEADER_LINE, TB1, TB2, host_overlay, run_host, trials, write_task


# -- runs on the host (local provider) -----------------------------------------------------
def test_terminal_bench_oracle_and_nop_on_local(cli, tmp_path: Path) -> None:
    params = json.dumps({"path": str(TB1), "sample_ids": ["greeting-file"]})
    for harness, status in (("oracle", "passed"), ("nop", "failed")):
        done = cli("run", "terminal_bench", harness, "none", "--config", str(host_overlay(tmp_path)),
                   "--benchmark-params", params, "--results-dir", str(tmp_path), "--run-name", "r")
        assert done.returncode == 0, done.stderr
        row = trials(tmp_path / "r" / f"terminal_bench__{harness}__none__local")["greeting-file"]
        assert row["status"] == status, row
        outcomes = set(row["details"]["tests"].values())
        assert outcomes == ({"passed"} if status == "passed" else {"failed"})
        # The official names: after the first `::`, a failure's last ` - message` cut off.
        assert {t.split(" - ")[0] for t in row["details"]["tests"]} == {"test_file_exists", "test_file_content"}


SWEBENCH_RUN_TESTS = """#!/bin/bash
echo "SWEBench results starts here"
if [ -f /app/fixed ]; then echo PASSED; else echo FAILED; fi
echo "SWEBench results ends here"
"""


def test_parser_name_swebench_grades_by_its_markers(cli, tmp_path: Path) -> None:
    dataset = tmp_path / "data"
    write_task(dataset, "swe-task", dockerfile="FROM x\nWORKDIR /app\n",
               task_yaml="instruction: fix it\nparser_name: swebench\n",
               files={"run-tests.sh": SWEBENCH_RUN_TESTS, "solution.sh": "touch /app/fixed\n"})
    assert run_host(cli, tmp_path, dataset, "oracle")["swe-task"]["status"] == "passed"
    row = run_host(cli, tmp_path, dataset, "nop")["swe-task"]
    assert row["status"] == "failed" and row["details"]["tests"] == {"tests": "failed"}


def test_no_run_tests_sh_fails_the_trial(cli, tmp_path: Path) -> None:
    dataset = tmp_path / "data"
    write_task(dataset, "no-runner", files={"solution.sh": "true\n", "tests/test_outputs.py": "def test_x():\n    pass\n"})
    row = run_host(cli, tmp_path, dataset, "oracle")["no-runner"]
    assert row["status"] == "failed" and row["details"]["failure_mode"] == "no_run_tests"


def test_a_huge_test_output_keeps_its_last_lines_and_the_summary(cli, tmp_path: Path) -> None:
    """12 MiB of output before the summary: exec's 10 MiB head cap would lose it; the last 50,000 lines keep it."""
    dataset = tmp_path / "data"
    write_task(dataset, "chatty", files={"solution.sh": "true\n", "run-tests.sh": f"""#!/bin/bash
        echo '{HEADER_LINE}'
        echo 'FAILED tests/test_outputs.py::test_early - in the head, beyond the kept lines'
        head -c 12582912 /dev/zero | tr '\\\\0' 'x' | fold -w 200
        echo
        echo '{HEADER_LINE}'
        echo 'PASSED tests/test_outputs.py::test_late'
        """})
    row = run_host(cli, tmp_path, dataset, "oracle")["chatty"]
    assert row["status"] == "passed", row
    assert row["details"]["tests"] == {"test_late": "passed"}


def test_a_crashed_agent_is_still_graded(cli, tmp_path: Path) -> None:
    dataset, config_dir = tmp_path / "data", tmp_path / "conf"
    write_task(dataset, "swe-task", dockerfile="FROM x\nWORKDIR /app\n", task_yaml="instruction: fix it\nparser_name: swebench\n",
               files={"run-tests.sh": SWEBENCH_RUN_TESTS, "solution.sh": "touch /app/fixed\n"})
    (config_dir / "harnesses").mkdir(parents=True)
    (config_dir / "harnesses" / "crash_after_solving.yaml").write_text(
        "name: crash_after_solving\ndescription: solves, then crashes\nimpl: crash_harness:CrashAfterSolving\n")
    pythonpath = os.pathsep.join([str(DATA / "terminal_bench_harness"), os.environ.get("PYTHONPATH", "")])
    row = run_host(cli, tmp_path, dataset, "crash_after_solving", "--config-dir", str(config_dir),
                   env={"PYTHONPATH": pythonpath})["swe-task"]
    assert row["status"] == "passed", row
    assert row["agent_exit_status"] == "agent_error" and "context length exceeded" in row["details"]["agent_error"]


# -- Terminal-Bench 2 from a git repository ------------------------------------------------
def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def tb2_repo(tmp_path: Path) -> Path:
    """A real git repository holding the TB2 fixture under tasks/, tagged v1, then changed on main."""
    repo = tmp_path / "tb2-repo"
    shutil.copytree(TB2, repo / "tasks")
    git("init", "-q", "-b", "main", cwd=repo)
    git("-c", "user.name=t", "-c", "user.email=t@example.com", "add", ".", cwd=repo)
    git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "tasks", cwd=repo)
    git("tag", "v1", cwd=repo)
    # After the tag, main breaks the solution: checking out v1 must not see this.
    (repo / "tasks" / "sum-numbers" / "solution" / "solve.sh").write_text("#!/bin/bash\necho 'print(0)' > /app/sum.py\n")
    git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qam", "break", cwd=repo)
    return repo


def git_overlay(tmp_path: Path, url: str, ref: str) -> Path:
    path = tmp_path / "git-source.yaml"
    path.write_text(f"benchmark:\n  runs_on_host: true\n  env: {{PYTHON: {sys.executable}}}\n"
                    f"  source: {{git: '{url}', ref: {ref}, subdir: tasks}}\n")
    return path


def test_terminal_bench_2_from_a_git_url_is_cloned_once_and_reused(cli, tmp_path: Path, tb2_repo: Path) -> None:
    cache = tmp_path / "cache"
    env = {"AGENTCOMPASS_CACHE_DIR": str(cache)}
    overlay = git_overlay(tmp_path, f"file://{tb2_repo}", "v1")
    done = cli("run", "terminal_bench_2", "oracle", "none", "--config", str(overlay),
               "--results-dir", str(tmp_path / "res"), "--run-name", "first", env=env)
    assert done.returncode == 0, done.stderr
    assert trials(tmp_path / "res" / "first" / "terminal_bench_2__oracle__none__local")["sum-numbers"]["status"] == "passed"
    checkouts = list((cache / "datasets").iterdir())
    assert len(checkouts) == 1 and git("rev-parse", "HEAD", cwd=checkouts[0]) == git("rev-parse", "v1", cwd=tb2_repo)
    shutil.rmtree(tb2_repo)  # the second run must come from the cache
    done = cli("run", "terminal_bench_2", "nop", "none", "--config", str(overlay),
               "--results-dir", str(tmp_path / "res"), "--run-name", "second", env=env)
    assert done.returncode == 0, done.stderr
    assert trials(tmp_path / "res" / "second" / "terminal_bench_2__nop__none__local")["sum-numbers"]["status"] == "failed"


def test_the_ref_selects_the_commit(cli, tmp_path: Path, tb2_repo: Path) -> None:
    overlay = git_overlay(tmp_path, str(tb2_repo), "main")  # a plain path works as a URL too
    done = cli("run", "terminal_bench_2", "oracle", "none", "--config", str(overlay),
               "--results-dir", str(tmp_path / "res"), "--run-name", "main",
               env={"AGENTCOMPASS_CACHE_DIR": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr
    assert trials(tmp_path / "res" / "main" / "terminal_bench_2__oracle__none__local")["sum-numbers"]["status"] == "failed"


@pytest.mark.parametrize(("url", "ref", "message"), [
    ("file:///nonexistent/agentcompass-repo", "v1", "cannot clone git source file:///nonexistent/agentcompass-repo"),
    (None, "no-such-tag", "cannot check out ref 'no-such-tag'"),
])
def test_a_bad_git_source_is_a_one_line_user_error(cli, tmp_path: Path, tb2_repo: Path, url: str | None,
                                                    ref: str, message: str) -> None:
    cache = tmp_path / "cache"
    overlay = git_overlay(tmp_path, url or f"file://{tb2_repo}", ref)
    done = cli("run", "terminal_bench_2", "oracle", "none", "--config", str(overlay),
               "--results-dir", str(tmp_path / "res"), env={"AGENTCOMPASS_CACHE_DIR": str(cache)})
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and message in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "res").exists()
    assert not any((cache / "datasets").iterdir())  # no half-made checkout left to be "reused"
