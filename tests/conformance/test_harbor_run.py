"""Harbor 0.26.0's own `harbor run` (its oracle and nop agents, `--env docker`, as its users run it) on the suite's
Harbor tasks vs `agentcompass run <recipe> oracle|nop none --env docker` on the same task directories: the same
reward per task, an exception on Harbor's side being an error on ours.

The tasks are those of tests/harbor_factory.py's schema fixtures (a verifier and agent user, a separate verifier,
a compose sidecar with its artifacts, skills, a healthcheck, multi-step with and without its min_reward met), the
Terminal-Bench 2 fixture, and the honest controls of verdict integrity (a server left running for the tests, a
package installed as pip lays it out, a non-root agent, /logs as Harbor's verifier-mode-matrix checks it). `network-policy` is left out: Harbor's docker environment refuses it outright (a
`no-network` agent phase under a `public` verifier: "this environment cannot change network policy after
start"), so there is no official reward to compare. The two separate-verifier tasks run as they are (their test
images have no WORKDIR) and with `WORKDIR /app` added, the one Harbor can run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from conformance.conftest import anchor_python, check_divergences
from conftest import DATA, run_cli
from harbor_factory import HONEST_CONTROLS, honest_controls, make_multi_step, make_recipe, schema_fixtures

ANCHOR = "harbor 0.26.0"
SEPARATE_VERIFIERS = ("separate-verifier", "sidecar-artifacts")
# Tasks whose official reward differs for a documented reason, and that reason's id.
DELIBERATE = {name: "harbor-verifier-workdir" for name in SEPARATE_VERIFIERS}


def build_dataset(root: Path, base_image: str) -> list[str]:
    ids = schema_fixtures(root, base_image)
    shutil.rmtree(root / "network-policy")
    ids.remove("network-policy")
    for name in SEPARATE_VERIFIERS:
        fixed = root / f"{name}-with-workdir"
        shutil.copytree(root / name, fixed)
        dockerfile = fixed / "tests" / "Dockerfile"
        dockerfile.write_text(dockerfile.read_text() + "WORKDIR /app\n")
        ids.append(fixed.name)
    make_multi_step(root, "hello-multi-step-stops", f"FROM {base_image}\nWORKDIR /app\n", first_min_reward=2.0)
    shutil.copytree(DATA / "terminal_bench_2" / "sum-numbers", root / "sum-numbers")
    controls = honest_controls(root, base_image)  # verdict integrity must not change an honest verdict
    return [*ids, "hello-multi-step-stops", "sum-numbers", *controls]


def official_run(python: Path, dataset: Path, agent: str, jobs: Path, env: dict[str, str]) -> dict[str, dict]:
    done = subprocess.run([str(python.parent / "harbor"), "run", "-p", str(dataset), "-a", agent, "-e", "docker",
                           "-o", str(jobs), "--job-name", agent, "-n", "4", "-y"],
                          capture_output=True, text=True, timeout=1800, cwd=jobs,
                          env={**os.environ, **env, "PYTHONPATH": "", "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    trials = [json.loads(path.read_text()) for path in (jobs / agent).glob("*/result.json")]
    return {trial["task_name"]: trial for trial in trials}


def official_reward(trial: dict) -> float | str:
    if trial.get("exception_info"):
        return f"error ({trial['exception_info'].get('exception_type')})"
    return float(trial["verifier_result"]["rewards"]["reward"])


def our_run(dataset: Path, harness: str, tmp_path: Path) -> dict[str, dict]:
    conf = tmp_path / "conf"
    make_recipe(conf, "harbor_conformance", dataset, runs_on_host=False, extra="scoring: valid_reward\n")
    run_name = f"conf-harbor-{uuid.uuid4().hex[:8]}"  # container names derive from it, on a shared engine
    done = run_cli("run", "harbor_conformance", harness, "none", "--env", "docker", "--config-dir", str(conf),
                   "--task-concurrency", "4", "--results-dir", str(tmp_path / "ours"), "--run-name", run_name,
                   timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    [trials] = (tmp_path / "ours" / run_name).glob(f"*__{harness}__*/trials.jsonl")
    return {row["task_id"]: row for row in map(json.loads, trials.read_text().splitlines())}


def our_reward(row: dict) -> float | str:
    return f"error ({str(row.get('message', ''))[:200]})" if row["status"] == "error" else float(row["reward"])


@pytest.mark.docker
def test_harbor_run_gives_our_rewards(base_image, compose_v2_env, tmp_path, tally, allowed):
    python = anchor_python(ANCHOR)
    dataset = tmp_path / "tasks"
    ids = build_dataset(dataset, base_image)
    found: dict[str, list[str]] = {"harbor/reward": [], **{key: [] for key in DELIBERATE.values()}}
    same = total = 0
    official_rewards: dict[tuple[str, str], float | str] = {}
    for agent in ("oracle", "nop"):
        jobs = tmp_path / f"official-{agent}"
        jobs.mkdir()
        theirs = official_run(python, dataset, agent, jobs, compose_v2_env)
        ours = our_run(dataset, agent, tmp_path)
        assert sorted(theirs) == sorted(ours) == sorted(ids)
        for task in sorted(ids):
            total += 1
            official, mine = official_reward(theirs[task]), our_reward(ours[task])
            official_rewards[(agent, task)] = official
            if official != mine:
                found[DELIBERATE.get(task, "harbor/reward")].append(f"{agent} {task}: official {official}, ours {mine}")
            else:
                same += 1
    # The official rewards the tasks were written for: Harbor really ran them.
    assert official_rewards[("oracle", "sum-numbers")] == 1.0 and official_rewards[("nop", "sum-numbers")] == 0.0
    assert official_rewards[("oracle", "separate-verifier-with-workdir")] == 1.0
    assert all(official_rewards[("oracle", task)] == 1.0 for task in HONEST_CONTROLS), official_rewards
    tally.record(ANCHOR, "oracle/nop rewards (harbor run on docker)", same, total)
    check_divergences(found, allowed)


def harbor_verdict(trial: dict) -> float | str:
    """Harbor's verdict on a trial: its reward when valid (an AgentTimeoutError leaves it valid), else none."""
    if not trial.get("reward_valid"):
        return "no valid reward"
    return float(trial["verifier_result"]["rewards"]["reward"])


def our_verdict(row: dict) -> float | str:
    return float(row["reward"]) if row["status"] in ("passed", "failed") and row["reward"] is not None else "no valid reward"


@pytest.mark.docker
def test_harbors_failure_paths_give_our_verdicts(base_image, compose_v2_env, tmp_path, tally, allowed):
    """The oracle's failure paths (tests/test_error_classes.py): a solution that hangs after solving, exits 3 after
    solving, hangs unsolved; a verifier that hangs, writes no reward, an empty or an unreadable one."""
    from test_error_classes import failure_path_tasks

    python = anchor_python(ANCHOR)
    dataset = tmp_path / "tasks"
    failure_path_tasks(dataset)
    for task in dataset.iterdir():
        (task / "environment" / "Dockerfile").write_text(f"FROM {base_image}\nWORKDIR /app\n")
    jobs = tmp_path / "official-oracle"
    jobs.mkdir()
    theirs = official_run(python, dataset, "oracle", jobs, compose_v2_env)
    ours = our_run(dataset, "oracle", tmp_path)
    found: dict[str, list[str]] = {"harbor/failure-paths": []}
    same = 0
    for task in sorted(ours):
        official, mine = harbor_verdict(theirs[task]), our_verdict(ours[task])
        if official == mine:
            same += 1
        else:
            found["harbor/failure-paths"].append(f"oracle {task}: official {official}, ours {mine}")
    valid = [v for v in map(harbor_verdict, theirs.values()) if v != "no valid reward"]
    verdicts = {task: harbor_verdict(trial) for task, trial in theirs.items()}
    assert valid and sum(valid) / len(valid) == pytest.approx(2 / 3), verdicts  # Harbor's mean, over valid rewards
    tally.record(ANCHOR, "oracle failure-path verdicts (harbor run on docker)", same, len(ours))
    check_divergences(found, allowed)
