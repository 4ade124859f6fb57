"""CooperBench: the shared sample parses offline; the fixture (tests/cooperbench_factory.py) runs on docker in
every setting, graded as CooperBench grades (oracle passes, nop fails, a conflicting pair is union-merged),
and two mini-swe-agents driven by a scripted endpoint cooperate: a message and a pushed branch."""

from __future__ import annotations

import json
import subprocess
import uuid
from itertools import combinations
from pathlib import Path

import pytest

from conftest import DATA, run_cli
from cooperbench_factory import FEATURES, make_config_dir, make_dataset
from cooperbench_llm import PerAgentLLM
from fake_llm_server import FakeLLMServer

from agentcompass.formats.cooperbench.format import CooperbenchFormat
from agentcompass.formats.cooperbench.grade import filter_test_files, parse_counts
from agentcompass.core.schema import Recipe

SAMPLE = DATA / "cooperbench"
SAMPLE_IMAGE = "akhatua/cooperbench-pallets-click:task2068"  # as SOURCE.md names it
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def sample_tasks(**params: object) -> list:
    recipe = Recipe(name="cooperbench", format="cooperbench", image="akhatua/cooperbench-{repo_slug}:task{task_id}",
                    params={"path": str(SAMPLE), **params})
    return CooperbenchFormat(recipe).load()


# -- the shared sample, no network ------------------------------------------------------------
def test_the_sample_task_parses_into_features_pairs_and_the_published_image():
    features = sorted(int(p.name[7:]) for p in (SAMPLE / "pallets_click_task" / "task2068").glob("feature*"))
    single = sample_tasks(setting="single")
    assert [t.id for t in single] == [f"pallets_click_task/task2068/f{f}" for f in features]
    assert single[0].instruction == (SAMPLE / "pallets_click_task/task2068/feature1/feature.md").read_text()
    coop = sample_tasks(setting="coop")
    assert [t.id for t in coop] == [f"pallets_click_task/task2068/f{a}+f{b}" for a, b in combinations(features, 2)]
    assert {t.image for t in coop} == {SAMPLE_IMAGE}
    assert {t.workdir for t in coop} == {"/workspace/repo"}
    assert all(t.compose is not None and t.build_context is None for t in coop)


def test_the_lite_subset_selects_its_pairs_and_sample_ids_select_one():
    lite = json.loads((SAMPLE / "subsets" / "lite.json").read_text())
    [entry] = [t for t in lite["tasks"] if t["repo"] == "pallets_click_task" and t["task_id"] == 2068]
    tasks = sample_tasks(setting="solo", subset="lite")
    assert [t.id for t in tasks] == [f"pallets_click_task/task2068/f{a}+f{b}" for a, b in entry["pairs"]]
    [one] = sample_tasks(setting="solo", sample_ids=["pallets_click_task/task2068/f1+f2"])
    assert "## Feature 1" in one.instruction and "## Feature 2" in one.instruction


def test_build_true_builds_the_task_dockerfile():
    [task] = sample_tasks(setting="single", build=True, sample_ids="pallets_click_task/task2068/f3")
    assert task.image is None and task.build_context == SAMPLE / "pallets_click_task" / "task2068"


def test_test_files_leave_an_agents_patch_and_pytest_counts_are_read():
    patch = (SAMPLE / "pallets_click_task/task2068/feature1/feature.patch").read_text()
    tests = (SAMPLE / "pallets_click_task/task2068/feature1/tests.patch").read_text()
    assert filter_test_files(patch + tests) == patch
    assert parse_counts("==== 3 failed, 41 passed in 1.2s ====") == (41, 3)


def test_a_bad_setting_and_an_unknown_subset_are_one_line_errors(cli, tmp_path):
    for params, needle in (('{"setting": "duo"}', "setting"), ('{"subset": "nosuch"}', "subset")):
        proc = cli("run", "cooperbench", "oracle", "none", "--benchmark-params",
                   json.dumps({**json.loads(params), "path": str(SAMPLE)}), "--results-dir", str(tmp_path / "r"))
        assert proc.returncode == 2 and needle in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
        assert "Traceback" not in proc.stderr and not (tmp_path / "r").exists()


def test_coop_is_refused_on_local_in_one_line(cli, tmp_path):
    proc = cli("run", "cooperbench", "oracle", "none", "--env", "local", "--benchmark-params",
               json.dumps({"path": str(SAMPLE), "setting": "coop"}), "--results-dir", str(tmp_path / "r"))
    assert proc.returncode == 2 and "coop" in proc.stderr and "docker" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "r").exists()


# -- the fixture on docker ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def fixture_config(tmp_path_factory, base_image) -> Path:
    root = tmp_path_factory.mktemp("cooperbench")
    return make_config_dir(root, make_dataset(root), base_image)


def run_fixture(config: Path, tmp: Path, harness: str, model: str, setting: str, *args: str, **params: object):
    run_name = f"cb-{setting}-{uuid.uuid4().hex[:8]}"
    proc = run_cli("run", "cooperbench_tiny", harness, model, "--env", "docker", "--config-dir", str(config),
                   "--benchmark-params", json.dumps({"setting": setting, **params}), "--results-dir", str(tmp),
                   "--run-name", run_name, *args, timeout=600)
    assert proc.returncode == 0, proc.stderr
    left = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=run={run_name}"], capture_output=True, text=True)
    assert left.stdout.strip() == "", "containers left behind"
    networks = subprocess.run(["docker", "network", "ls", "-q", "--filter", f"label=run={run_name}"],
                              capture_output=True, text=True)
    assert networks.stdout.strip() == "", "networks left behind"
    [run_dir] = [p.parent for p in tmp.glob(f"{run_name}/*/summary.json")]
    trials = {t["task_id"]: t for t in map(json.loads, (run_dir / "trials.jsonl").read_text().splitlines())}
    return run_dir, trials


def pair(a: int, b: int | None = None) -> str:
    return "tiny_calc_task/task7/" + (f"f{a}+f{b}" if b else f"f{a}")


@pytest.mark.parametrize("setting", ["single", "solo"])
def test_oracle_passes_and_nop_fails_alone(fixture_config, tmp_path, setting):
    _, passed = run_fixture(fixture_config, tmp_path, "oracle", "none", setting)
    expected = [pair(f) for f in FEATURES] if setting == "single" else [pair(*p) for p in combinations(FEATURES, 2)]
    assert sorted(passed) == sorted(expected)
    assert {t["status"] for t in passed.values()} == {"passed"}
    _, failed = run_fixture(fixture_config, tmp_path, "nop", "none", setting, sample_ids=[expected[0]])
    assert [t["status"] for t in failed.values()] == ["failed"]


def test_coop_oracle_merges_gold_patches_and_union_merges_the_conflicting_pair(fixture_config, tmp_path):
    run_dir, trials = run_fixture(fixture_config, tmp_path, "oracle", "none", "coop")
    assert {t["status"] for t in trials.values()} == {"passed"}
    statuses = {task: (t["details"]["merge_status"], t["details"]["merge_strategy"]) for task, t in trials.items()}
    # 1 and 3 both append to calc.py: git's merge conflicts, the union driver keeps both.
    assert statuses == {pair(1, 2): ("clean", "naive"), pair(1, 3): ("conflicts", "union"),
                        pair(2, 3): ("clean", "naive")}
    conflicting = trials[pair(1, 3)]["details"]
    assert "def mul" in conflicting["merged_diff"] and "def neg" in conflicting["merged_diff"]
    assert [(r["feature"], r["passed"], r["tests_passed"]) for r in conflicting["feature_results"]] == [(1, True, 2), (3, True, 2)]
    trial_dir = run_dir / "tasks" / "tiny_calc_task" / "task7" / "f1+f3" / "attempt-1"
    assert "def mul" in (trial_dir / "agent1.patch").read_text() and "def neg" in (trial_dir / "agent2.patch").read_text()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["merge_conflict_rate"] == round(1 / 3, 6)
    _, nothing = run_fixture(fixture_config, tmp_path, "nop", "none", "coop", sample_ids=[pair(1, 2)])
    assert nothing[pair(1, 2)]["status"] == "failed"


# -- two mini-swe-agents cooperating ---------------------------------------------------------------
AGENT1 = [  # feature 1: implement, publish on the shared remote, tell the colleague
    "printf '\\n\\ndef mul(a, b):\\n    return a * b\\n' >> calc.py && git add -A && git commit -qm mul"
    " && git push -q team HEAD:agent1 && send_message agent2 'mul is on team/agent1'",
    SUBMIT,
]
AGENT2 = [  # feature 2: wait for the message, look at the colleague's branch, implement
    "for i in $(seq 50); do out=$(receive_messages); case \"$out\" in *team/agent1*) echo \"$out\"; break;; esac;"
    " sleep 1; done; git fetch -q team && git show team/agent1:calc.py | grep -c 'def mul'",
    "printf '\\n\\ndef whisper(s):\\n    return s.lower()\\n' >> text.py && echo done",
    SUBMIT,
]
ALONE = [  # solo: both features of the pair
    "printf '\\n\\ndef mul(a, b):\\n    return a * b\\n' >> calc.py"
    " && printf '\\n\\ndef whisper(s):\\n    return s.lower()\\n' >> text.py",
    SUBMIT,
]


def test_two_mini_swe_agents_exchange_a_message_and_a_branch(fixture_config, tmp_path):
    llm = PerAgentLLM(commands=ALONE, scripts={"You are agent1": AGENT1, "You are agent2": AGENT2})
    with FakeLLMServer(llm) as server:
        run_dir, trials = run_fixture(fixture_config, tmp_path, "mini_swe_agent", "openai/fake-coder", "coop",
                                      "--model-base-url", server.base_url, "--model-api-key", "sk-fake",
                                      sample_ids=[pair(1, 2)])
    trial = trials[pair(1, 2)]
    assert trial["status"] == "passed", trial["message"]
    trial_dir = run_dir / "tasks" / "tiny_calc_task" / "task7" / "f1+f2" / "attempt-1"
    [message] = [json.loads(line) for line in (trial_dir / "messages.jsonl").read_text().splitlines()]
    assert (message["from"], message["to"], message["text"]) == ("agent1", "agent2", "mul is on team/agent1")
    assert message["time"]
    seen = (trial_dir / "agent2" / "agent.log").read_text()
    # The message arrived, and calc.py on the pushed branch, fetched from the shared remote, holds mul.
    assert "[exit 0] [Message from agent1]: mul is on team/agent1\n1\n" in seen
    assert trial["details"]["merge_status"] == "clean"
    agents = trial["details"]["agents"]
    requests = {name: [r for r in llm.successes if f"You are {name}" in json.dumps(r.body["messages"][:2])]
                for name in ("agent1", "agent2")}
    for name in ("agent1", "agent2"):
        assert agents[name]["usage"]["model_calls"] == len(requests[name]) > 0
    assert trial["usage"]["model_calls"] == len(llm.successes)


@pytest.mark.parametrize(("setting", "task", "rewards"), [("single", pair(2), {"feature2": 1.0}),
                                                          ("solo", pair(1, 2), {"feature1": 1.0, "feature2": 1.0})])
def test_a_mini_swe_agent_alone_implements_its_features(fixture_config, tmp_path, setting, task, rewards):
    with FakeLLMServer(PerAgentLLM(commands=ALONE, scripts={})) as server:
        run_dir, trials = run_fixture(fixture_config, tmp_path, "mini_swe_agent", "openai/fake-coder", setting,
                                      "--model-base-url", server.base_url, "--model-api-key", "sk-fake",
                                      sample_ids=[task])
    assert trials[task]["status"] == "passed", trials[task]["message"]
    assert trials[task]["rewards"] == rewards
    assert "def whisper" in trials[task]["details"]["patch"]


def test_validate_passes_on_the_fixture(fixture_config, tmp_path):
    proc = run_cli("validate", "cooperbench_tiny", "--env", "docker", "--config-dir", str(fixture_config),
                   "--benchmark-params", json.dumps({"setting": "coop", "subset": "tiny"}), "--results-dir", str(tmp_path),
                   timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_dataset_can_come_from_a_git_repository(tmp_path, monkeypatch):
    """source: {git, ref, subdir} as the shipped recipe has it, here a local repository (no network)."""
    make_dataset(tmp_path / "upstream")
    upstream = tmp_path / "upstream"
    for args in (["init", "-q"], ["add", "dataset"], ["-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "data"]):
        subprocess.run(["git", *args], cwd=upstream, check=True, capture_output=True)
    ref = subprocess.run(["git", "rev-parse", "HEAD"], cwd=upstream, check=True, capture_output=True, text=True).stdout.strip()
    monkeypatch.setenv("AGENTCOMPASS_CACHE_DIR", str(tmp_path / "cache"))
    recipe = Recipe(name="cooperbench", format="cooperbench", source={"git": str(upstream), "ref": ref, "subdir": "dataset"},
                    params={"setting": "coop", "subset": "tiny"})
    [task] = CooperbenchFormat(recipe).load()
    assert task.id == pair(1, 3) and task.build_context is not None and (task.build_context / "runner.sh").is_file()


def test_a_patch_that_does_not_apply_makes_the_merge_missing_input(fixture_config, base_image, tmp_path):
    from agentcompass.formats.cooperbench.grade import merge
    from agentcompass.providers.docker.provider import DockerProvider
    from agentcompass.core.sandbox import SandboxSpec
    from agentcompass.core.context import TrialContext

    task_dir = fixture_config.parent / "dataset" / "tiny_calc_task" / "task7"
    name = f"ac-cb-test-{uuid.uuid4().hex[:8]}"
    sandbox = DockerProvider().open(SandboxSpec(name=name, workdir="/workspace/repo", build_context=task_dir,
                                                build_args={"BASE_IMAGE": base_image}, labels={"agentcompass": "1", "run": name},
                                                image_entrypoint=False))  # runner.sh is the grader's to run
    try:
        sandbox.exec("mkdir -p /patches")
        trial = TrialContext("t", 1, tmp_path, name)
        gold = (task_dir / "feature1" / "feature.patch").read_text()
        stale = gold.replace("return a + b", "return a - b")  # its context is not in the tree
        merged = merge(sandbox, trial, gold, stale)
    finally:
        sandbox.close()
    assert merged["merge_status"] == "missing_input"
    assert merged["apply_status"] == {"agent1": "applied", "agent2": "failed"}
    assert "def mul" in merged["merged_diff"]
