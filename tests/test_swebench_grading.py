"""SWE-bench grading end to end: a small real repository in SWE-bench form, graded by swebench's own code.

The instance is a git repository with a bug (`mul` adds), a test patch that adds the failing
test, and a gold patch, written as SWE-bench 5.x rows (image, eval_script, log_parser
parse_log_pytest). Several instances share it so one run yields many verdicts at once: gold
patch, empty patch, a patch that breaks a PASS_TO_PASS test, one that does not apply, one whose
tests are killed, one whose eval log is 12 MiB, and one that only adds a git-ignored file.
Every verdict is checked against swebench's own `get_eval_report` on the same eval.log.

Longer than 400 lines because its cases share one built instance image and its rows; split with them next.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from fake_llm_server import FakeLLM, FakeLLMServer
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


@pytest.mark.docker
def test_oracle_run_resolves_and_writes_predictions(cli, calc_repo, calc_image, tmp_path):
    rows = calc_rows(tmp_path / "rows.jsonl", calc_repo, calc_image, "python3")
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
    assert (trial_dir / "patch.diff").read_text() == calc_repo.patches["gold"]
    predictions = [json.loads(line) for line in (run_dir / "predictions.jsonl").read_text().splitlines()]
    assert [(p["instance_id"], p["model_name_or_path"]) for p in predictions] == [(IDS["gold"], "none")]
    assert predictions[0]["model_patch"] == (trial_dir / "patch.diff").read_text()
    print(f"\none graded instance end to end (CLI start to exit, docker): {elapsed:.1f}s; "
          f"trial phases {row['timings']}")


@pytest.mark.docker
def test_eval_grades_predictions_and_round_trips(cli, calc_repo, calc_image, tmp_path):
    rows = calc_rows(tmp_path / "rows.jsonl", calc_repo, calc_image, "python3")
    (tmp_path / "preds.json").write_text(json.dumps(predictions_of(calc_repo)))
    selection = {"path": str(rows), "sample_ids": list(IDS.values())}
    common = ["--env", "docker", "--results-dir", str(tmp_path / "res"), "--task-concurrency", "4",
              "--benchmark-params", json.dumps(selection)]
    first = cli("eval", "swebench_lite", "--predictions", str(tmp_path / "preds.json"), "--run-name", "one", *common)
    assert first.returncode == 0, first.stderr
    run_dir = tmp_path / "res" / "one" / "swebench_lite__predictions__my-model__docker"
    graded = trials(run_dir)
    assert_verdicts(graded, calc_repo)
    assert_verdicts_match_swebench(rows, run_dir, graded)

    # Tests killed (OOM): swebench flags a likely infra failure but the instance is simply unresolved, not retried.
    killed = graded[IDS["killed"]]
    assert killed["status"] == "failed" and killed["retries"] == 0, killed
    assert killed["details"]["infra_failure"] is True and killed["details"]["infra_failure_reason"] == "out_of_memory"
    report = official_report(rows, run_dir, IDS["killed"])
    assert report["infra_failure"] is True and report["resolved"] is False

    # A 12 MiB eval log is graded whole: its verdict is at the end.
    big = graded[IDS["big_log"]]
    log = (run_dir / "tasks" / IDS["big_log"] / "attempt-1" / "eval.log").read_text()
    assert len(log) > 12 * 1024 * 1024 and ">>>>> End Test Output" in log[-3000:]
    assert big["status"] == "passed", big["message"]

    # A patch that only adds a git-ignored file is graded as submitted, not as an empty diff.
    ignored = graded[IDS["ignored_only"]]
    assert ignored["status"] == "failed" and not ignored["message"].startswith("empty patch"), ignored
    assert ignored["details"]["tests_parsed"] is True

    predictions = {p["instance_id"]: p["model_patch"] for p in map(json.loads, (run_dir / "predictions.jsonl").open())}
    assert predictions == {IDS[kind]: patch for kind, patch in calc_repo.patches.items()}

    again = cli("eval", "swebench_lite", "--predictions", str(run_dir / "predictions.jsonl"), "--run-name", "two", *common)
    assert again.returncode == 0, again.stderr
    second = trials(tmp_path / "res" / "two" / "swebench_lite__predictions__my-model__docker")
    assert {k: r["status"] for k, r in second.items()} == {k: r["status"] for k, r in graded.items()}


def local_eval(cli, calc_repo: CalcRepo, tmp_path: Path, rows: Path, predictions: dict, *extra: str):
    repos = tmp_path / "repos"
    for instance_id in (json.loads(line)["instance_id"] for line in rows.read_text().splitlines()):
        if not (repos / instance_id).exists():
            shutil.copytree(calc_repo.path, repos / instance_id)
    (tmp_path / "preds.json").write_text(json.dumps(predictions))
    overlay = tmp_path / "local.yaml"
    overlay.write_text("benchmark:\n  runs_on_host: true\n")
    done = cli("eval", "swebench_lite", "--predictions", str(tmp_path / "preds.json"), "--env", "local",
               "--config", str(overlay), "--results-dir", str(tmp_path / "res"), "--run-name", "local",
               "--benchmark-params", json.dumps({"path": str(rows), "repos_dir": str(repos)}), *extra)
    assert done.returncode == 0, done.stderr
    return done, tmp_path / "res" / "local" / "swebench_lite__predictions__my-model__local"


def test_eval_on_local_provider(cli, calc_repo, tmp_path):
    """Where no image is used, repos_dir/<instance_id> is staged at /testbed."""
    kinds = ["gold", "empty", "breaks_p2p", "not_applying", "ignored_only"]
    rows = write_rows(tmp_path / "rows.jsonl", [row_of(calc_repo, IDS[k], "unused", sys.executable) for k in kinds])
    _, run_dir = local_eval(cli, calc_repo, tmp_path, rows, predictions_of(calc_repo, kinds))
    graded = trials(run_dir)
    assert_verdicts(graded, calc_repo)
    assert_verdicts_match_swebench(rows, run_dir, graded)


def test_eval_rate_is_over_the_dataset_selection(cli, calc_repo, tmp_path):
    """As the official run report: instances without a prediction are not run and count as unresolved."""
    kinds = ["gold", "empty", "breaks_p2p", "not_applying"]
    rows = write_rows(tmp_path / "rows.jsonl", [row_of(calc_repo, IDS[k], "unused", sys.executable) for k in kinds])
    done, run_dir = local_eval(cli, calc_repo, tmp_path, rows, predictions_of(calc_repo, ["gold", "empty"]))
    assert sorted(trials(run_dir)) == sorted([IDS["gold"], IDS["empty"]])
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["tasks"], summary["tasks_attempted"], summary["solved_tasks"]) == (4, 2, 1)
    assert "solved 1/4 selected tasks (0.250" in done.stdout, done.stdout


class AssetServer:
    """Serves a directory over HTTP on 127.0.0.1, as the hub serves image_assets urls."""

    def __init__(self, root: Path) -> None:
        class Quiet(SimpleHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), partial(Quiet, directory=str(root)))
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/{name}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_image_assets_are_restored_before_the_tests(cli, calc_repo, tmp_path):
    """A multimodal row: its test compares against a binary baseline the text test patch cannot carry."""
    from swebench.harness.run_evaluation import _inject_asset_restore

    baseline = bytes(range(256)) * 4
    (tmp_path / "served").mkdir()
    (tmp_path / "served" / "baseline.png").write_bytes(baseline)
    test = ("\n\ndef test_baseline():\n    from pathlib import Path\n"
            f"    assert Path('tests/baseline.png').read_bytes() == bytes(range(256)) * 4\n")
    test_patch = diff_of_edit(calc_repo.path, {"tests/test_calc.py": TESTS + NEW_TEST + test})
    server = AssetServer(tmp_path / "served")
    try:
        row = row_of(calc_repo, "calc__calc-30", "unused", sys.executable, test_patch=test_patch,
                     eval_script=eval_script(calc_repo, sys.executable, test_patch),
                     FAIL_TO_PASS=json.dumps([F2P, "tests/test_calc.py::test_baseline"]),
                     image_assets=json.dumps({"test_patch": [{"path": "tests/baseline.png",
                                                              "url": server.url("baseline.png")}]}))
        rows = write_rows(tmp_path / "rows.jsonl", [row])
        predictions = {"calc__calc-30": {"model_name_or_path": "my-model", "model_patch": calc_repo.patches["gold"]}}
        _, run_dir = local_eval(cli, calc_repo, tmp_path, rows, predictions)
    finally:
        server.close()
    graded = trials(run_dir)["calc__calc-30"]
    assert graded["status"] == "passed", graded["message"]
    assert_verdicts_match_swebench(rows, run_dir, {"calc__calc-30": graded})
    trial_dir = run_dir / "tasks" / "calc__calc-30" / "attempt-1"
    assert (trial_dir / "image_assets" / "tests__baseline.png").read_bytes() == baseline
    from swebench.harness.utils import make_test_spec

    from agentcompass.formats.swebench.data import instance_for_test_spec, normalize_row

    official_script = _inject_asset_restore(
        make_test_spec(instance_for_test_spec(normalize_row(row), "unused")).eval_script,
        ["mkdir -p $(dirname tests/baseline.png) && cp /image_assets/tests__baseline.png tests/baseline.png"])
    assert (trial_dir / "eval.sh").read_text() == official_script


# -- an agent's sandbox versus the submission ------------------------------------------------

def agent_run(cli, tmp_path: Path, rows: Path, commands: list[str], run_name: str, *extra: str):
    """`agentcompass run` with the real mini_swe_agent driven by a scripted model endpoint."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {"HOME": str(home), "AGENTCOMPASS_CACHE_DIR": str(tmp_path / "cache"), "MSWEA_GLOBAL_CONFIG_DIR": "",
           "OPENAI_API_KEY": "", "MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": "2"}
    with FakeLLMServer(FakeLLM(commands, api_key=API_KEY)) as server:
        done = cli("run", "swebench_lite", "mini_swe_agent", "glm-5.2", "--model-base-url", server.base_url,
                   "--model-api-key", API_KEY, "--results-dir", str(tmp_path / "res"), "--run-name", run_name,
                   *extra, env=env)
    assert done.returncode == 0, done.stderr
    [run_dir] = (tmp_path / "res" / run_name).glob("swebench_lite__mini_swe_agent__*")
    return trials(run_dir)[AGENT_ID], run_dir


SUBMIT_CALC_DIFF = "cd /testbed && echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git diff -- calc.py"


@pytest.mark.docker
def test_fresh_grading_ignores_what_the_patch_does_not_carry(cli, calc_repo, calc_image, tmp_path):
    """The agent makes mul use a git-ignored build artefact: the tests pass in its sandbox, not in a fresh one.
    The fresh grading sandbox also has none of the recipe's resource limits."""
    rows = calc_rows(tmp_path / "rows.jsonl", calc_repo, calc_image, "python3")
    commands = [
        "cd /testbed && mkdir -p build && printf 'def mul(a, b):\\n    return a * b\\n' > build/fastmul.py && "
        "printf 'def add(a, b):\\n    return a + b\\n\\n\\ndef mul(a, b):\\n    from build.fastmul import mul as fast\\n"
        "    return fast(a, b)\\n' > calc.py && python3 -c 'from calc import mul; assert mul(2, 3) == 6'",
        SUBMIT_CALC_DIFF,
    ]
    overlay = tmp_path / "limits.yaml"
    overlay.write_text("benchmark:\n  resources: {cpus: 1, memory_mb: 512}\n")
    verdicts = {}
    for mode in ("fresh", "same"):
        params = {"path": str(rows), "sample_ids": [AGENT_ID], "evaluation_mode": mode}
        row, run_dir = agent_run(cli, tmp_path, rows, commands, mode, "--env", "docker", "--config", str(overlay),
                                 "--benchmark-params", json.dumps(params))
        patch = (run_dir / "tasks" / AGENT_ID / "attempt-1" / "patch.diff").read_text()
        assert "from build.fastmul import mul" in patch and "build/fastmul.py" not in patch
        assert official_report(rows, run_dir, AGENT_ID)["resolved"] == (row["status"] == "passed")
        log = (run_dir / "tasks" / AGENT_ID / "attempt-1" / "eval.log").read_text()
        verdicts[mode] = (row["status"], f"memory limit: {512 * 1024 * 1024}" in log, row["details"].get("evaluation_mode"))
    assert verdicts == {"fresh": ("failed", False, "fresh"), "same": ("passed", True, "same")}


def test_the_harness_submission_is_graded_not_the_tree(cli, calc_repo, tmp_path):
    """The agent fixes mul, leaves a scratch conftest.py that breaks the test run, and submits only calc.py."""
    rows = write_rows(tmp_path / "rows.jsonl", [row_of(calc_repo, AGENT_ID, "unused", sys.executable)])
    repos = tmp_path / "repos"
    shutil.copytree(calc_repo.path, repos / AGENT_ID)
    (tmp_path / "local.yaml").write_text("benchmark:\n  runs_on_host: true\n")
    commands = [
        "cd /testbed && sed -i '6s/a + b/a * b/' calc.py && "
        "echo 'raise RuntimeError(\"scratch\")' > conftest.py && echo notes > repro_notes.txt",
        SUBMIT_CALC_DIFF,
    ]
    params = {"path": str(rows), "repos_dir": str(repos)}
    row, run_dir = agent_run(cli, tmp_path, rows, commands, "submission", "--env", "local",
                             "--config", str(tmp_path / "local.yaml"), "--benchmark-params", json.dumps(params))
    patch = (run_dir / "tasks" / AGENT_ID / "attempt-1" / "patch.diff").read_text()
    assert patch == calc_repo.patches["gold"]  # the submission, byte for byte: no conftest.py, no notes
    assert row["status"] == "passed", row["message"]
    assert official_report(rows, run_dir, AGENT_ID)["resolved"] is True


# -- classic rows: the eval script swebench 4.1.0 made ---------------------------------------

@pytest.mark.docker
def test_classic_rows_grade_as_swebench_4(cli, calc_repo, calc_image, tmp_path):
    """Classic rows (no eval_script): a test patch that only adds a file the model also created (not
    removed first: it fails to apply, as in 4.1.0), and one with a binary new file next to a modified
    test file the model edited (the reset still restores it)."""
    adds_only = diff_of_edit(calc_repo.path, {"tests/test_mul.py": "from calc import mul\n" + NEW_TEST})
    model_also_creates = diff_of_edit(calc_repo.path, {
        "calc.py": FIXED, "tests/test_mul.py": "from calc import mul\n\n\ndef test_mul_zero():\n    assert mul(0, 5) == 0\n"})
    with_binary = diff_of_edit(calc_repo.path, {"tests/test_calc.py": TESTS + NEW_TEST,
                                                "tests/expected.png": bytes(range(256))})
    model_edits_tests = diff_of_edit(calc_repo.path, {"calc.py": FIXED,
                                                      "tests/test_calc.py": TESTS.replace("== 5\n", "== 5  # checked\n")})

    def classic(instance_id: str, test_patch: str, f2p: str, p2p: list[str]) -> dict:
        return {"instance_id": instance_id, "repo": "pytest-dev/pytest", "version": "8.0", "image": calc_image,
                "base_commit": calc_repo.base_commit, "problem_statement": "mul adds", "patch": calc_repo.patches["gold"],
                "test_patch": test_patch, "FAIL_TO_PASS": [f2p], "PASS_TO_PASS": p2p}

    cases = {  # instance -> (row, the model's patch, resolved as swebench 4.1.0 grades it)
        "calc__calc-41": (classic("calc__calc-41", adds_only, "tests/test_mul.py::test_mul", []), calc_repo.patches["gold"], True),
        "calc__calc-42": (classic("calc__calc-42", adds_only, "tests/test_mul.py::test_mul", []), model_also_creates, False),
        "calc__calc-43": (classic("calc__calc-43", with_binary, F2P, [P2P]), model_edits_tests, True),
    }
    rows = write_rows(tmp_path / "rows.jsonl", [row for row, _, _ in cases.values()])
    predictions = {i: {"model_name_or_path": "my-model", "model_patch": patch} for i, (_, patch, _) in cases.items()}
    (tmp_path / "preds.json").write_text(json.dumps(predictions))
    done = cli("eval", "swebench_lite", "--predictions", str(tmp_path / "preds.json"), "--env", "docker",
               "--results-dir", str(tmp_path / "res"), "--run-name", "classic", "--task-concurrency", "3",
               "--benchmark-params", json.dumps({"path": str(rows)}))
    assert done.returncode == 0, done.stderr
    run_dir = tmp_path / "res" / "classic" / "swebench_lite__predictions__my-model__docker"
    graded = trials(run_dir)
    assert {i: r["status"] == "passed" for i, r in graded.items()} == {i: c[2] for i, c in cases.items()}, \
        {i: r["message"] for i, r in graded.items()}
    assert_verdicts_match_swebench(rows, run_dir, graded)
    created_log = (run_dir / "tasks" / "calc__calc-42" / "attempt-1" / "eval.log").read_text()
    assert "tests/test_mul.py: already exists in working directory" in created_log
    script = (run_dir / "tasks" / "calc__calc-41" / "attempt-1" / "eval.sh").read_text()
    assert f"\ngit checkout {calc_repo.base_commit} \n" in script and "rm -f" not in script
    binary_script = (run_dir / "tasks" / "calc__calc-43" / "attempt-1" / "eval.sh").read_text()
    assert f"\ngit checkout {calc_repo.base_commit} tests/test_calc.py\n" in binary_script
