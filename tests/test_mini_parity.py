"""mini_swe_agent against mini-swe-agent's own SWE-bench runner, on one SWE-bench instance.

The instance is a tiny repository at /testbed in a locally built image with a fake conda
`testbed` env: /root/.bashrc sets CONDA_DEFAULT_ENV and puts the env's `python` first on PATH
(the base image has no `python`), as SWE-bench images activate theirs. Both runners talk to the
same scripted endpoint; mini's is driven through its Python API (`process_instance`, as its
`mini-extra swebench` command calls it), ours through the CLI with no harness flags, so the
recipe's harness defaults are what is compared.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from conftest import run_cli

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # mini imports litellm here too: no price-map download
from fake_llm_server import FakeLLM, FakeLLMServer
from testbed_image import build_testbed_image

INSTANCE = "parity__calc-1"
CALC = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a + b  # the bug\n"
PROBE = 'echo "python=$(which python) env=${CONDA_DEFAULT_ENV:-none} pwd=$PWD pager=$PAGER"'
# Alone in its command: mini's `docker exec` copies the two streams concurrently, so their order
# within one command's output is not fixed there.
STDERR = "echo on-stderr >&2"
SUBMITS = [PROBE, STDERR, "sed -i 's/return a + b  # the bug/return a * b/' calc.py", "git diff -- calc.py > patch.txt",
           "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat patch.txt"]
EVAL = ("#!/bin/bash\ncd /testbed\n: '>>>>> Start Test Output'\n"
        "python3 -c \"import calc; print('PASSED' if calc.add(2, 3) == 5 else 'FAILED', 'test_calc.py::test_add'); "
        "print('PASSED' if calc.mul(2, 3) == 6 else 'FAILED', 'test_calc.py::test_mul')\"\n"
        ": '>>>>> End Test Output'\n")


@pytest.fixture(scope="module")
def parity_image(base_image: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """(image tag, base commit): the repository at /testbed and the fake conda env, built once."""
    return build_testbed_image(base_image, tmp_path_factory.mktemp("parity-image"), {"calc.py": CALC.encode()}, "mini-parity")


def instance_row(image: str, commit: str) -> dict:
    return {"instance_id": INSTANCE, "repo": "parity/calc", "version": "0.1", "base_commit": commit,
            "problem_statement": "mul(2, 3) returns 5; it should multiply.", "hints_text": "", "created_at": "",
            "patch": "", "test_patch": "", "FAIL_TO_PASS": json.dumps(["test_calc.py::test_mul"]),
            "PASS_TO_PASS": json.dumps(["test_calc.py::test_add"]), "environment_setup_commit": commit,
            "image": image, "eval_script": EVAL, "log_parser": "parse_log_pytest", "eval_type": "pass_and_fail"}


def run_mini(llm: FakeLLM, row: dict, out: Path, agent: dict) -> tuple[str, str, dict]:
    """mini-swe-agent's SWE-bench runner on one instance: (exit status, patch, trajectory)."""
    os.environ["MSWEA_SILENT_STARTUP"] = "1"
    from minisweagent.config import get_config_from_spec
    from minisweagent.run.benchmarks.swebench import DEFAULT_CONFIG_FILE, process_instance
    from minisweagent.run.benchmarks.utils.batch_progress import RunBatchProgressManager
    from minisweagent.utils.serialize import recursive_merge

    label = f"agentcompass-test-parity={uuid.uuid4().hex[:12]}"
    with FakeLLMServer(llm) as server:
        config = recursive_merge(get_config_from_spec(str(DEFAULT_CONFIG_FILE)), {
            "model": {"model_name": "openai/fake-coder-1", "cost_tracking": "ignore_errors",
                      "model_kwargs": {"api_base": server.base_url, "api_key": "EMPTY"}},
            "environment": {"run_args": ["--rm", "--label", label]},
            "agent": agent,
        })
        try:
            process_instance({**row, "image_name": row["image"]}, out, config, RunBatchProgressManager(1, out / "exits.yaml"))
        finally:  # mini stops its container in the background; remove it here, by our own label
            found = subprocess.run(["docker", "ps", "-aq", "--filter", f"label={label}"], capture_output=True, text=True)
            if found.stdout.split():
                subprocess.run(["docker", "rm", "-f", *found.stdout.split()], capture_output=True)
    prediction = json.loads((out / "preds.json").read_text())[INSTANCE]
    trajectory = json.loads((out / INSTANCE / f"{INSTANCE}.traj.json").read_text())
    return trajectory["info"]["exit_status"], prediction["model_patch"], trajectory


def run_ours(llm: FakeLLM, rows: Path, tmp: Path, *args: str) -> tuple[str, str, dict, dict]:
    """`agentcompass run swebench mini_swe_agent` on the instance: (exit status, submission, trajectory, trial)."""
    with FakeLLMServer(llm) as server:
        proc = run_cli("run", "swebench", "mini_swe_agent", "openai_compatible", "model.name=fake-coder-1",
                       "--model-base-url", server.base_url, "--env", "docker", "--benchmark-params",
                       json.dumps({"path": str(rows)}), "--results-dir", str(tmp / "results"), "--run-name", "parity",
                       "--max-retries", "0", *args, cwd=tmp, env={"MSWEA_GLOBAL_CONFIG_DIR": "",
                                                                   "AGENTCOMPASS_CACHE_DIR": str(tmp / "cache")})
    assert proc.returncode == 0, proc.stderr
    [run_dir] = [p.parent for p in (tmp / "results").glob("*/*/trials.jsonl")]
    [trial] = [json.loads(line) for line in (run_dir / "trials.jsonl").read_text().splitlines()]
    trajectory = json.loads((run_dir / "tasks" / INSTANCE / "attempt-1" / f"{INSTANCE}.traj.json").read_text())
    return trajectory["info"]["exit_status"], trajectory["info"]["submission"], trajectory, trial


def compare(parity_image, tmp_path, llm_of, agent: dict, harness_params: dict | None = None):
    image, commit = parity_image
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps(instance_row(image, commit)) + "\n")
    mini_llm, our_llm = llm_of(), llm_of()
    (tmp_path / "mini").mkdir()
    mini = run_mini(mini_llm, instance_row(image, commit), tmp_path / "mini", agent)
    extra = ["--harness-params", json.dumps(harness_params)] if harness_params else []
    ours = run_ours(our_llm, rows, tmp_path, *extra)
    # The first request each runner sends: the same prompt, the same tool, the same request fields.
    assert our_llm.requests[0].body == mini_llm.requests[0].body
    # Every command ran in the same environment and printed the same (the conda env active).
    mini_observations = [r.body["messages"][-1]["content"] for r in mini_llm.requests[1:]]
    our_observations = [r.body["messages"][-1]["content"] for r in our_llm.requests[1:]]
    assert our_observations == mini_observations
    return mini, ours, mini_llm


@pytest.mark.docker
def test_a_submitting_run_matches_mini_swe_agents_runner(parity_image, tmp_path):
    mini, ours, mini_llm = compare(parity_image, tmp_path, lambda: FakeLLM(SUBMITS), agent={})
    probe, stderr = (mini_llm.requests[i].body["messages"][-1]["content"] for i in (1, 2))
    assert "python=/opt/conda/envs/testbed/bin/python env=testbed pwd=/testbed pager=cat" in probe
    assert "on-stderr" in stderr
    assert mini[0] == ours[0] == "Submitted"
    assert mini[1] == ours[1] and "+    return a * b" in ours[1]
    trial = ours[3]
    assert trial["agent_exit_status"] == "submitted"
    assert ours[2]["instance_id"] == INSTANCE and ours[2]["trajectory_format"] == mini[2]["trajectory_format"]
    mini_prediction = json.loads((tmp_path / "mini" / "preds.json").read_text())[INSTANCE]
    [our_prediction] = [json.loads(line) for p in (tmp_path / "results").glob("*/*/predictions.jsonl")
                        for line in p.read_text().splitlines()]
    assert our_prediction["model_name_or_path"] == mini_prediction["model_name_or_path"] == "openai/fake-coder-1"


@pytest.mark.docker
def test_a_run_that_hits_the_step_limit_matches_and_submits_nothing(parity_image, tmp_path):
    mini, ours, _ = compare(parity_image, tmp_path, lambda: FakeLLM(["ls", "echo hi > scratch.txt"]),
                            agent={"step_limit": 3}, harness_params={"step_limit": 3})
    assert mini[0] == ours[0] == "LimitsExceeded"
    assert mini[1] == ours[1] == ""
    assert ours[3]["agent_exit_status"] == "limits_exceeded" and ours[3]["status"] == "failed"


@pytest.mark.docker
def test_a_run_that_overflows_the_context_window_matches_and_is_the_agents_failure(parity_image, tmp_path):
    mini, ours, _ = compare(parity_image, tmp_path, lambda: FakeLLM(SUBMITS, context_window_after=2), agent={})
    assert mini[0] == ours[0] == "ContextWindowExceededError"
    assert mini[1] == ours[1] == ""
    # Graded, as unresolved, not an error.
    assert ours[3]["agent_exit_status"] == "context_window_exceeded" and ours[3]["status"] == "failed", ours[3]
