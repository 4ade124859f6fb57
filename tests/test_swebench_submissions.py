"""SWE-bench grading of what an agent submits, not what its sandbox holds; and classic rows graded by the eval script
swebench 4.1.0 made."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from fake_llm_server import FakeLLM, FakeLLMServer
from swebench_calc import (AGENT_ID, API_KEY, F2P, FIXED, NEW_TEST, P2P, TESTS, assert_verdicts_match_swebench,
                           calc_rows, diff_of_edit, official_report, row_of, trials, write_rows)
from swebench_calc import calc_image, calc_repo  # noqa: F401 (fixtures)


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


@pytest.mark.docker
def test_eval_of_a_file_without_some_instances_says_no_rerun_can_add_them(cli, calc_repo, calc_image, tmp_path):
    """Issue 44: an instance the predictions file lacks counts as unresolved, as in the official report; the run
    does not end "incomplete ... rerun to finish", which no rerun could do, but says what is missing and why."""
    rows = write_rows(tmp_path / "rows.jsonl", [row_of(calc_repo, i, calc_image, "python3")
                                                for i in ("calc__calc-51", "calc__calc-52")])
    (tmp_path / "preds.json").write_text(json.dumps({"calc__calc-51": {"model_name_or_path": "my-model",
                                                                       "model_patch": calc_repo.patches["gold"]}}))
    done = cli("eval", "swebench_lite", "--predictions", str(tmp_path / "preds.json"), "--env", "docker",
               "--results-dir", str(tmp_path / "res"), "--run-name", "partial", "--benchmark-params",
               json.dumps({"path": str(rows)}))
    assert done.returncode == 0, done.stderr
    assert "rerun with the same --run-name to finish" not in done.stdout, done.stdout
    assert "1 of 2 selected tasks have no prediction in the file (e.g. calc__calc-52)" in done.stdout, done.stdout
    assert "solved 1/2 selected tasks" in done.stdout  # the missing one is unresolved, in the rate's base
    assert done.stdout.splitlines()[-1].startswith("results: ")
