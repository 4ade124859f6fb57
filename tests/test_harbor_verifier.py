"""Harbor's [verifier] environment_mode: "shared" grades where the agent worked, "separate" in a new
sandbox of the verifier's own image (built from tests/) that gets only the declared artifacts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentcompass.core.errors import UserError
from agentcompass.formats.harbor.format import HarborFormat
from agentcompass.core.schema import Recipe
from harbor_factory import make_recipe, make_task

SOLVE = "echo 42 > /app/answer.txt && echo scratch > /app/scratch.txt && mkdir -p /logs/artifacts && echo log > /logs/artifacts/run.txt"
# Full marks only when the answer came through and nothing else the agent left behind did.
TEST = ('if [ "$(cat /app/answer.txt)" = 42 ] && [ -f /logs/artifacts/run.txt ] && [ ! -e /app/scratch.txt ]; '
        "then echo 1; else echo 0; fi > /logs/verifier/reward.txt")


def separate_task(root: Path, task_id: str, base_image: str, verifier: str) -> Path:
    task = make_task(root, task_id, solve=SOLVE, test=TEST, dockerfile=f"FROM {base_image}\nWORKDIR /app\n")
    toml = (task / "task.toml").read_text()
    # After [verifier]'s own keys: a table in `verifier` would otherwise take them in (refused as unknown there).
    toml = 'artifacts = ["/app/answer.txt"]\n' + toml.replace("[verifier]\ntimeout_sec = 60\n", f"[verifier]\ntimeout_sec = 60\n{verifier}")
    (task / "task.toml").write_text(toml)
    (task / "tests" / "Dockerfile").write_text(f"FROM {base_image}\nCOPY test.sh /tests/test.sh\n")
    return task


@pytest.mark.docker
def test_separate_verifier_gets_only_the_artifacts(cli, base_image, tmp_path):
    dataset, conf = tmp_path / "tasks", tmp_path / "conf"
    separate_task(dataset, "answer-shared", base_image, "")
    separate_task(dataset, "answer-separate", base_image, 'environment_mode = "separate"\n')
    make_recipe(conf, "artifacts", dataset, runs_on_host=False)
    done = cli("run", "artifacts", "oracle", "none", "--env", "docker", "--config-dir", str(conf),
               "--results-dir", str(tmp_path / "res"), "--run-name", "r", "--max-retries", "0")
    assert done.returncode == 0, done.stderr
    run_dir = tmp_path / "res" / "r" / "artifacts__oracle__none__docker"
    rows = {r["task_id"]: r for r in map(json.loads, (run_dir / "trials.jsonl").read_text().splitlines())}
    assert rows["answer-shared"]["reward"] == 0.0 and rows["answer-shared"]["details"]["environment_mode"] == "shared"
    assert rows["answer-separate"]["reward"] == 1.0, rows["answer-separate"]
    assert rows["answer-separate"]["details"]["environment_mode"] == "separate"
    artifacts = run_dir / "tasks" / "answer-separate" / "attempt-1" / "artifacts"
    assert (artifacts / "app" / "answer.txt").read_text() == "42\n"
    assert (artifacts / "logs" / "artifacts" / "run.txt").read_text() == "log\n"


def test_environment_mode_follows_harbors_rules(tmp_path):
    def load(verifier: str, tests_dockerfile: bool = True) -> list:
        root = tmp_path / str(len(list(tmp_path.iterdir())))
        task = separate_task(root, "t", "img", verifier)
        if not tests_dockerfile:
            (task / "tests" / "Dockerfile").unlink()
        return HarborFormat(Recipe(name="h", format="harbor", source={"path": str(root)})).load()

    assert load("")[0].data["environment_mode"] == "shared"
    implied = load("[verifier.environment]\ncpus = 3\n")[0]  # a verifier environment table implies separate
    assert implied.data["environment_mode"] == "separate" and implied.data["verifier"]["settings"]["cpus"] == 3
    assert implied.data["verifier"]["bundled_tests"] is True  # tests/Dockerfile bakes /tests in
    [shared_with_table] = load('environment_mode = "shared"\n[verifier.environment]\ncpus = 3\n')
    assert "needs environment_mode" in shared_with_table.refusal
    # Without tests/Dockerfile, a copy of [environment] in the task's own image, the tests uploaded (Harbor 0.26).
    fallback = load('environment_mode = "separate"\n', tests_dockerfile=False)[0].data["verifier"]
    assert fallback["bundled_tests"] is False and fallback["build_context"].endswith("/t/environment")
    assert fallback["settings"]["workdir"] == "/app"
    own = load('environment_mode = "separate"\n[verifier.environment]\ndocker_image = "v:1"\n')[0].data["verifier"]
    assert (own["image"], own["bundled_tests"]) == ("v:1", True)
    with pytest.raises(UserError, match="environment_mode: Input should be 'shared' or 'separate'"):
        load('environment_mode = "elsewhere"\n')


def test_separate_verifier_on_the_host_gets_the_tests_uploaded(cli, tmp_path):
    """Where no image is built (a task run on the host), the separate sandbox gets /tests uploaded."""
    dataset, conf = tmp_path / "tasks", tmp_path / "conf"
    separate_task(dataset, "answer-separate", "unused", 'environment_mode = "separate"\n')
    make_recipe(conf, "artifacts", dataset, runs_on_host=True)
    done = cli("run", "artifacts", "oracle", "none", "--env", "local", "--config-dir", str(conf),
               "--results-dir", str(tmp_path / "res"), "--run-name", "r", "--max-retries", "0")
    assert done.returncode == 0, done.stderr
    run_dir = tmp_path / "res" / "r" / "artifacts__oracle__none__local"
    [row] = map(json.loads, (run_dir / "trials.jsonl").read_text().splitlines())
    assert row["reward"] == 1.0 and row["details"]["environment_mode"] == "separate", row


def test_logs_are_kept_only_when_there_is_output(cli, tmp_path):
    """agent.log and verifier.log hold the oracle's and test.sh's output; a command that printed nothing
    leaves no empty file behind, and a missing reward then says the verifier printed nothing."""
    dataset, conf = tmp_path / "tasks", tmp_path / "conf"
    make_task(dataset, "chatty", solve="echo solving; echo warn >&2", test="echo checking; echo 1 > /logs/verifier/reward.txt")
    make_task(dataset, "quiet", solve="true", test="echo 1 > /logs/verifier/reward.txt")
    make_task(dataset, "silent-no-reward", solve="true", test="true")
    make_recipe(conf, "logs", dataset)
    done = cli("run", "logs", "oracle", "none", "--env", "local", "--config-dir", str(conf),
               "--results-dir", str(tmp_path / "res"), "--run-name", "r", "--max-retries", "0")
    assert done.returncode == 0, done.stderr
    run_dir = tmp_path / "res" / "r" / "logs__oracle__none__local"
    rows = {row["task_id"]: row for row in map(json.loads, (run_dir / "trials.jsonl").read_text().splitlines())}
    assert rows["chatty"]["status"] == rows["quiet"]["status"] == "passed", rows
    chatty, quiet = (run_dir / "tasks" / name / "attempt-1" for name in ("chatty", "quiet"))
    assert (chatty / "agent.log").read_text() == "solving\nwarn\n"
    assert (chatty / "verifier.log").read_text() == "checking\n"
    assert sorted(p.name for p in quiet.iterdir()) == ["kept", "result.json", "verifier"]  # kept: for a regrade
    assert (quiet / "verifier" / "reward.txt").read_text() == "1\n"
    assert rows["silent-no-reward"]["error_category"] == "verifier", rows
    assert rows["silent-no-reward"]["message"].endswith("wrote neither /logs/verifier/reward.txt nor reward.json; "
                                                        "it printed nothing"), rows
