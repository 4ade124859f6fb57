"""A small real repository in SWE-bench form, shared by the SWE-bench grading tests (here and on GCP).

The instance is a git repository with a bug (`mul` adds), a test patch that adds the failing
test, and a gold patch, written as SWE-bench 5.x rows (image, eval_script, log_parser
parse_log_pytest). Several instances share it so one run yields many verdicts at once: gold
patch, empty patch, a patch that breaks a PASS_TO_PASS test, one that does not apply, one whose
tests are killed, one whose eval log is 12 MiB, and one that only adds a git-ignored file.
Every verdict is checked against swebench's own `get_eval_report` on the same eval.log."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from shared_cache import exclusive


F2P = "tests/test_calc.py::test_mul"
P2P = "tests/test_calc.py::test_add"
CALC = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a + b\n"
FIXED = CALC.replace("def mul(a, b):\n    return a + b", "def mul(a, b):\n    return a * b")
TESTS = "from calc import add, mul\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
NEW_TEST = "\n\ndef test_mul():\n    assert mul(2, 3) == 6\n"
GITIGNORE = "build/\n"
NOT_APPLYING = (
    "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n"
    "-def divide(a, b):\n-    return a * b\n+def divide(a, b):\n+    return a / b\n"
)
# Tests killed mid-run, as the kernel's OOM killer kills them: no results, and the shell that ran them says "Killed".
KILLED = "import os\nimport signal\n\nos.kill(os.getpid(), signal.SIGKILL)\n\n\n" + FIXED
BIG_LOG = FIXED.replace("    return a * b", "    print('x' * (12 * 1024 * 1024))\n    return a * b")
IDS = {"gold": "calc__calc-1", "empty": "calc__calc-2", "breaks_p2p": "calc__calc-3", "not_applying": "calc__calc-4",
       "killed": "calc__calc-5", "big_log": "calc__calc-6", "ignored_only": "calc__calc-7"}
AGENT_ID = "calc__calc-20"
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com", "GIT_AUTHOR_DATE": "2024-01-01T00:00:00Z",
           "GIT_COMMITTER_DATE": "2024-01-01T00:00:00Z"}
MEMORY_LINE = ('echo "memory limit: $(cat /sys/fs/cgroup/memory.max 2>/dev/null '
               '|| cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null)"')
API_KEY = "sk-test-5a105e8b9d40e1329780"


@dataclass
class CalcRepo:
    path: Path
    base_commit: str
    test_patch: str
    patches: dict[str, str]  # kind -> patch, made by git from real edits


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV}).stdout


def diff_of_edit(repo: Path, files: dict[str, str | bytes]) -> str:
    """The patch git makes of these edits (new files, ignored and binary ones included), the tree left clean."""
    for name, content in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    git(repo, "add", "-f", "-A", "--", *files)
    patch = git(repo, "diff", "--cached", "--binary")
    git(repo, "reset", "-q", "--hard")
    git(repo, "clean", "-fdxq")
    return patch


@pytest.fixture(scope="session")
def calc_repo(tmp_path_factory: pytest.TempPathFactory) -> CalcRepo:
    repo = tmp_path_factory.mktemp("calc") / "testbed"
    (repo / "tests").mkdir(parents=True)
    (repo / "calc.py").write_text(CALC)
    (repo / "tests" / "test_calc.py").write_text(TESTS)
    (repo / ".gitignore").write_text(GITIGNORE)
    (repo / "conftest.py").write_text("")  # puts /testbed on sys.path for a bare `pytest` (classic rows)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "calc with a bug in mul")  # fixed dates: the same commit every session
    patches = {
        "gold": diff_of_edit(repo, {"calc.py": FIXED}),
        "empty": "",
        "breaks_p2p": diff_of_edit(repo, {"calc.py": FIXED.replace("return a + b", "return a - b")}),
        "not_applying": NOT_APPLYING,
        "killed": diff_of_edit(repo, {"calc.py": KILLED}),
        "big_log": diff_of_edit(repo, {"calc.py": BIG_LOG}),
        "ignored_only": diff_of_edit(repo, {"build/notes.txt": "a note in a git-ignored directory\n"}),
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
    with exclusive(tag):  # parallel test workers wait for one build
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


def eval_script(repo: CalcRepo, python: str, test_patch: str | None = None, via_sh: bool = False) -> str:
    """What a SWE-bench 5.x row's eval_script does: reset and patch the tests, run them between the markers
    (`via_sh`: through `sh -c`, as tox or make run tests)."""
    reset = f"git checkout {repo.base_commit} tests/test_calc.py"
    tests = f"{python} -m pytest -rA -p no:cacheprovider tests/test_calc.py"
    return "\n".join([
        "#!/bin/bash", "set -uxo pipefail", "cd /testbed", MEMORY_LINE, reset,
        f"git apply -v - <<'EOF_TEST_PATCH'\n{test_patch or repo.test_patch}\nEOF_TEST_PATCH",
        ": '>>>>> Start Test Output'",
        f"sh -c '{tests}'" if via_sh else tests,
        ": '>>>>> End Test Output'", reset,
    ]) + "\n"


def row_of(repo: CalcRepo, instance_id: str, image: str, python: str, **fields) -> dict:
    return {
        "instance_id": instance_id, "repo": "calc/calc", "version": "0.1", "base_commit": repo.base_commit,
        "problem_statement": "mul(2, 3) returns 5; it should multiply.", "hints_text": "", "created_at": "",
        "patch": repo.patches["gold"], "test_patch": repo.test_patch,
        "FAIL_TO_PASS": json.dumps([F2P]), "PASS_TO_PASS": json.dumps([P2P]),
        "environment_setup_commit": repo.base_commit, "image": image,
        "eval_script": eval_script(repo, python), "log_parser": "parse_log_pytest", "eval_type": "pass_and_fail",
        **fields,
    }


def write_rows(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def calc_rows(path: Path, repo: CalcRepo, image: str, python: str) -> Path:
    rows = [row_of(repo, i, image, python) for i in [*IDS.values(), AGENT_ID]]
    rows[list(IDS).index("killed")]["eval_script"] = eval_script(repo, python, via_sh=True)
    return write_rows(path, rows)


def trials(run_dir: Path) -> dict[str, dict]:
    return {row["task_id"]: row for row in map(json.loads, (run_dir / "trials.jsonl").read_text().splitlines())}


def predictions_of(repo: CalcRepo, kinds: list[str] | None = None) -> dict[str, dict]:
    """The .json object form, keyed by instance_id."""
    return {IDS[kind]: {"model_name_or_path": "my-model", "model_patch": patch}
            for kind, patch in repo.patches.items() if kinds is None or kind in kinds}


def official_report(rows: Path, run_dir: Path, instance_id: str) -> dict:
    """swebench's own verdict on the eval.log this run wrote for the instance."""
    from swebench.harness.grading import get_eval_report
    from swebench.harness.utils import make_test_spec

    from agentcompass.formats.swebench.data import instance_for_test_spec, normalize_row

    row = next(r for r in map(json.loads, rows.read_text().splitlines()) if r["instance_id"] == instance_id)
    spec = make_test_spec(instance_for_test_spec(normalize_row(row), row.get("image") or "img"))
    trial_dir = run_dir / "tasks" / instance_id / "attempt-1"
    prediction = {"instance_id": instance_id, "model_name_or_path": "m",
                  "model_patch": (trial_dir / "patch.diff").read_text()}
    return get_eval_report(spec, prediction, str(trial_dir / "eval.log"), include_tests_status=True)[instance_id]


def assert_verdicts(rows: dict[str, dict], repo: CalcRepo) -> None:
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
    # Every graded patch is the submitted one, byte for byte.
    for kind, patch in repo.patches.items():
        if IDS[kind] in rows:
            assert rows[IDS[kind]]["details"]["patch"] == patch, kind
    assert gold["details"]["evaluation_mode"] == "fresh"


def assert_verdicts_match_swebench(rows_path: Path, run_dir: Path, rows: dict[str, dict]) -> None:
    for instance_id, row in rows.items():
        if (run_dir / "tasks" / instance_id / "attempt-1" / "eval.log").is_file():
            assert official_report(rows_path, run_dir, instance_id)["resolved"] == (row["status"] == "passed"), instance_id
