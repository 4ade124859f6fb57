"""SWE-bench grading end to end: a small real repository in SWE-bench form, graded by swebench's own code.

The instance is a git repository with a bug (`mul` adds), a test patch that adds the failing
test, and a gold patch, written as SWE-bench 5.x rows (image, eval_script, log_parser
parse_log_pytest). Four instances share it so one run yields every verdict at once:
gold patch, empty patch, a patch that breaks a PASS_TO_PASS test, and one that does not apply.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

F2P = "tests/test_calc.py::test_mul"
P2P = "tests/test_calc.py::test_add"
CALC = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a + b\n"
TESTS = "from calc import add, mul\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
NEW_TEST = "\n\ndef test_mul():\n    assert mul(2, 3) == 6\n"
NOT_APPLYING = (
    "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n"
    "-def divide(a, b):\n-    return a * b\n+def divide(a, b):\n+    return a / b\n"
)
IDS = {"gold": "calc__calc-1", "empty": "calc__calc-2", "breaks_p2p": "calc__calc-3", "not_applying": "calc__calc-4"}
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com", "GIT_AUTHOR_DATE": "2024-01-01T00:00:00Z",
           "GIT_COMMITTER_DATE": "2024-01-01T00:00:00Z"}


@dataclass
class CalcRepo:
    path: Path
    base_commit: str
    test_patch: str
    patches: dict[str, str]  # kind -> patch, made by git from real edits


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV}).stdout


def diff_of_edit(repo: Path, files: dict[str, str]) -> str:
    for name, text in files.items():
        (repo / name).write_text(text)
    patch = git(repo, "diff")
    git(repo, "checkout", "--", ".")
    return patch


@pytest.fixture(scope="session")
def calc_repo(tmp_path_factory: pytest.TempPathFactory) -> CalcRepo:
    repo = tmp_path_factory.mktemp("calc") / "testbed"
    (repo / "tests").mkdir(parents=True)
    (repo / "calc.py").write_text(CALC)
    (repo / "tests" / "test_calc.py").write_text(TESTS)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "calc with a bug in mul")  # fixed dates: the same commit every session
    fixed = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"
    patches = {
        "gold": diff_of_edit(repo, {"calc.py": fixed}),
        "empty": "",
        "breaks_p2p": diff_of_edit(repo, {"calc.py": fixed.replace("return a + b", "return a - b")}),
        "not_applying": NOT_APPLYING,
    }
    test_patch = diff_of_edit(repo, {"tests/test_calc.py": TESTS + NEW_TEST})
    return CalcRepo(repo, git(repo, "rev-parse", "HEAD").strip(), test_patch, patches)


@pytest.fixture(scope="session")
def calc_image(base_image: str, calc_repo: CalcRepo, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The repository at /testbed with pytest, in an image tagged by its content (built once)."""
    import docker

    dockerfile = (f"FROM {base_image}\nRUN apt-get update && apt-get install -y --no-install-recommends "
                  "python3-pytest && rm -rf /var/lib/apt/lists/*\nCOPY testbed /testbed\nWORKDIR /testbed\n")
    tag = f"agentcompass-test/swebench-calc:{hashlib.sha256((dockerfile + calc_repo.base_commit).encode()).hexdigest()[:12]}"
    client = docker.from_env()
    try:
        client.images.get(tag)
        return tag
    except docker.errors.ImageNotFound:
        pass
    context = tmp_path_factory.mktemp("calc-image")
    shutil.copytree(calc_repo.path, context / "testbed")
    (context / "Dockerfile").write_text(dockerfile)
    client.images.build(path=str(context), tag=tag, rm=True)
    return tag


def eval_script(repo: CalcRepo, python: str) -> str:
    """What a SWE-bench 5.x row's eval_script does: reset and patch the tests, run them between the markers."""
    reset = f"git checkout {repo.base_commit} tests/test_calc.py"
    return "\n".join([
        "#!/bin/bash", "set -uxo pipefail", "cd /testbed", reset,
        f"git apply -v - <<'EOF_TEST_PATCH'\n{repo.test_patch}\nEOF_TEST_PATCH",
        ": '>>>>> Start Test Output'",
        f"{python} -m pytest -rA -p no:cacheprovider tests/test_calc.py",
        ": '>>>>> End Test Output'", reset,
    ]) + "\n"


def write_rows(path: Path, repo: CalcRepo, image: str, python: str) -> Path:
    rows = [{
        "instance_id": instance_id, "repo": "calc/calc", "version": "0.1", "base_commit": repo.base_commit,
        "problem_statement": "mul(2, 3) returns 5; it should multiply.", "hints_text": "", "created_at": "",
        "patch": repo.patches["gold"], "test_patch": repo.test_patch,
        "FAIL_TO_PASS": json.dumps([F2P]), "PASS_TO_PASS": json.dumps([P2P]),
        "environment_setup_commit": repo.base_commit, "image": image,
        "eval_script": eval_script(repo, python), "log_parser": "parse_log_pytest", "eval_type": "pass_and_fail",
    } for instance_id in IDS.values()]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def trials(run_dir: Path) -> dict[str, dict]:
    return {row["task_id"]: row for row in map(json.loads, (run_dir / "trials.jsonl").read_text().splitlines())}


def predictions_of(repo: CalcRepo) -> dict[str, dict]:
    """The .json object form, keyed by instance_id."""
    return {IDS[kind]: {"model_name_or_path": "my-model", "model_patch": patch} for kind, patch in repo.patches.items()}


def assert_verdicts(rows: dict[str, dict]) -> None:
    gold, empty, breaks, bad = (rows[IDS[k]] for k in ("gold", "empty", "breaks_p2p", "not_applying"))
    assert gold["status"] == "passed", gold["message"]
    assert gold["details"]["resolved"] is True
    assert gold["details"]["FAIL_TO_PASS"] == {"success": [F2P], "failure": []}
    assert gold["details"]["PASS_TO_PASS"] == {"success": [P2P], "failure": []}
    assert empty["status"] == "failed" and empty["message"].startswith("empty patch"), empty
    assert breaks["status"] == "failed" and breaks["details"]["resolved"] is False
    assert breaks["details"]["FAIL_TO_PASS"] == {"success": [F2P], "failure": []}
    assert breaks["details"]["PASS_TO_PASS"] == {"success": [], "failure": [P2P]}
    assert bad["status"] == "failed" and bad["message"].startswith("patch does not apply"), bad
    assert bad["details"]["patch"] == NOT_APPLYING


@pytest.mark.docker
def test_oracle_run_resolves_and_writes_predictions(cli, calc_repo, calc_image, tmp_path):
    rows = write_rows(tmp_path / "rows.jsonl", calc_repo, calc_image, "python3")
    started = time.monotonic()
    done = cli("run", "swebench_lite", "oracle", "none", "--env", "docker", "--results-dir", str(tmp_path / "res"),
               "--run-name", "gold", "--benchmark-params", json.dumps({"path": str(rows), "sample_ids": [IDS["gold"]]}))
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    run_dir = tmp_path / "res" / "gold" / "swebench_lite__oracle__none__docker"
    row = trials(run_dir)[IDS["gold"]]
    assert row["status"] == "passed", row["message"]
    trial_dir = run_dir / "tasks" / IDS["gold"] / "attempt-1"
    assert "PASSED tests/test_calc.py::test_mul" in (trial_dir / "eval.log").read_text()
    assert "+    return a * b" in (trial_dir / "patch.diff").read_text()
    predictions = [json.loads(line) for line in (run_dir / "predictions.jsonl").read_text().splitlines()]
    assert [(p["instance_id"], p["model_name_or_path"]) for p in predictions] == [(IDS["gold"], "none")]
    assert predictions[0]["model_patch"] == (trial_dir / "patch.diff").read_text()
    print(f"\none graded instance end to end (CLI start to exit, docker): {elapsed:.1f}s; "
          f"trial phases {row['timings']}")


@pytest.mark.docker
def test_eval_grades_predictions_and_round_trips(cli, calc_repo, calc_image, tmp_path):
    rows = write_rows(tmp_path / "rows.jsonl", calc_repo, calc_image, "python3")
    (tmp_path / "preds.json").write_text(json.dumps(predictions_of(calc_repo)))
    common = ["--env", "docker", "--results-dir", str(tmp_path / "res"), "--task-concurrency", "4",
              "--benchmark-params", json.dumps({"path": str(rows)})]
    first = cli("eval", "swebench_lite", "--predictions", str(tmp_path / "preds.json"), "--run-name", "one", *common)
    assert first.returncode == 0, first.stderr
    run_dir = tmp_path / "res" / "one" / "swebench_lite__predictions__my-model__docker"
    assert_verdicts(trials(run_dir))

    again = cli("eval", "swebench_lite", "--predictions", str(run_dir / "predictions.jsonl"), "--run-name", "two", *common)
    assert again.returncode == 0, again.stderr
    second = trials(tmp_path / "res" / "two" / "swebench_lite__predictions__my-model__docker")
    assert_verdicts(second)
    assert {k: r["status"] for k, r in second.items()} == {k: r["status"] for k, r in trials(run_dir).items()}


def test_eval_on_local_provider(cli, calc_repo, tmp_path):
    """Where no image is used, repos_dir/<instance_id> is staged at /testbed."""
    repos = tmp_path / "repos"
    for instance_id in IDS.values():
        shutil.copytree(calc_repo.path, repos / instance_id)
    rows = write_rows(tmp_path / "rows.jsonl", calc_repo, "unused", sys.executable)
    (tmp_path / "preds.json").write_text(json.dumps(predictions_of(calc_repo)))
    overlay = tmp_path / "local.yaml"
    overlay.write_text("benchmark:\n  runs_on_host: true\n")
    done = cli("eval", "swebench_lite", "--predictions", str(tmp_path / "preds.json"), "--env", "local",
               "--config", str(overlay), "--results-dir", str(tmp_path / "res"), "--run-name", "local",
               "--benchmark-params", json.dumps({"path": str(rows), "repos_dir": str(repos)}))
    assert done.returncode == 0, done.stderr
    assert_verdicts(trials(tmp_path / "res" / "local" / "swebench_lite__predictions__my-model__local"))
