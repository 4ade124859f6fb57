"""mini_swe_agent vs mini-swe-agent 2.4.6's own SWE-bench runner (`process_instance`, in its side venv),
both against one scripted endpoint, on an instance whose repository has a CRLF file. The script: a 400
from the model first (both retry), `cat` of the CRLF file, a command that times out, a fix to the CRLF
file, the submission. Compared: every request body, every observation, the submission, the exit status
and the prediction's model name."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from conformance.conftest import anchor_python, check_divergences, run_driver
from conftest import run_cli
from fake_llm_server import FakeLLM, FakeLLMServer
from testbed_image import build_testbed_image

ANCHOR = "mini-swe-agent 2.4.6"
INSTANCE = "conformance__crlf-1"
TIMEOUT_STEP = 1  # index into COMMANDS of the command that times out
COMMANDS = ["cat win.txt", "printf 'started\\n'; sleep 20", "sed -i 's/^b/c/' win.txt", "git diff > patch.txt",
            "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat patch.txt"]
EVAL = "#!/bin/bash\ncd /testbed\n: '>>>>> Start Test Output'\necho PASSED t.py::test\n: '>>>>> End Test Output'\n"


@pytest.fixture(scope="module")
def crlf_image(base_image: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    return build_testbed_image(base_image, tmp_path_factory.mktemp("crlf-image"), {"win.txt": b"a\r\nb\r\n"}, "mini-crlf")


def row_of(image: str, commit: str) -> dict:
    return {"instance_id": INSTANCE, "repo": "conformance/crlf", "version": "0.1", "base_commit": commit,
            "problem_statement": "win.txt's second line should read c.", "hints_text": "", "created_at": "",
            "patch": "", "test_patch": "", "FAIL_TO_PASS": json.dumps(["t.py::test"]), "PASS_TO_PASS": "[]",
            "environment_setup_commit": commit, "image": image, "eval_script": EVAL,
            "log_parser": "parse_log_pytest", "eval_type": "pass_and_fail"}


def script() -> FakeLLM:
    return FakeLLM(list(COMMANDS), failures=[400])


@pytest.mark.docker
def test_mini_swe_agents_runner_and_ours_agree(crlf_image, tmp_path, tally, allowed):
    image, commit = crlf_image
    row = row_of(image, commit)
    mini_llm, our_llm = script(), script()
    (tmp_path / "mini").mkdir()
    with FakeLLMServer(mini_llm) as server:
        mini = run_driver(anchor_python(ANCHOR), "mini_official.py", {
            "row": row, "out": str(tmp_path / "mini"), "api_base": server.base_url,
            "label": f"agentcompass-test-conformance={uuid.uuid4().hex[:12]}",
            "environment": {"timeout": 3}}, timeout=900)
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps(row) + "\n")
    with FakeLLMServer(our_llm) as server:
        done = run_cli("run", "swebench", "mini_swe_agent", "openai_compatible", "model.name=fake-coder-1",
                       "--model-base-url", server.base_url, "--env", "docker", "--benchmark-params",
                       json.dumps({"path": str(rows)}), "--harness-params", json.dumps({"command_timeout_s": 3}),
                       "--results-dir", str(tmp_path / "results"), "--run-name", "conformance", "--max-retries", "0",
                       cwd=tmp_path, env={"MSWEA_GLOBAL_CONFIG_DIR": "", "AGENTCOMPASS_CACHE_DIR": str(tmp_path / "cache")},
                       timeout=900)
    assert done.returncode == 0, done.stderr
    [run_dir] = [p.parent for p in (tmp_path / "results").glob("*/*/trials.jsonl")]
    trajectory = json.loads((run_dir / "tasks" / INSTANCE / "attempt-1" / f"{INSTANCE}.traj.json").read_text())
    [prediction] = [json.loads(line) for line in (run_dir / "predictions.jsonl").read_text().splitlines()]

    found: dict[str, list[str]] = {"mini/requests": [], "mini/observations": [], "mini/submission": [],
                                   "mini/exit-status": [], "mini-timed-out-command": []}
    compared = 0
    # Every request: the same bodies up to the observations (the 400'd one included, as both retry it).
    assert [r.status for r in mini_llm.requests][:2] == [400, 200], [r.status for r in mini_llm.requests]
    theirs_bodies, our_bodies = [r.body for r in mini_llm.requests], [r.body for r in our_llm.requests]
    compared += 1
    if len(theirs_bodies) != len(our_bodies) or theirs_bodies[0] != our_bodies[0] or theirs_bodies[1] != our_bodies[1]:
        found["mini/requests"].append(f"{len(theirs_bodies)} requests officially, {len(our_bodies)} ours, "
                                      "or the first two differ")
    # The observation after each command (the last message of the next request).
    for step in range(len(COMMANDS) - 1):
        compared += 1
        theirs = mini_llm.successes[step + 1].body["messages"][-1]["content"]
        ours = our_llm.successes[step + 1].body["messages"][-1]["content"]
        if theirs == ours:
            continue
        key = "mini-timed-out-command" if step == TIMEOUT_STEP else "mini/observations"
        found[key].append(f"step {step + 1}: official {theirs[-300:]!r}; ours {ours[-300:]!r}")
    assert "a\nb" in mini_llm.successes[1].body["messages"][-1]["content"]  # text mode: the \r is gone officially
    compared += 2
    if mini["patch"] != trajectory["info"]["submission"] or mini["patch"] != prediction["model_patch"]:
        found["mini/submission"].append(f"official {mini['patch']!r}, ours {prediction['model_patch']!r}")
    if (mini["exit_status"], mini["model_name_or_path"]) != (trajectory["info"]["exit_status"],
                                                           prediction["model_name_or_path"]):
        found["mini/exit-status"].append(f"official {mini['exit_status']}, ours {trajectory['info']['exit_status']}")
    assert mini["exit_status"] == "Submitted" and "+c\n" in mini["patch"], mini["patch"]
    tally.record(ANCHOR, "runner outcomes", compared - sum(len(v) for v in found.values()), compared)
    check_divergences(found, allowed)
