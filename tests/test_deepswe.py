"""DeepSWE's tasks, as Harbor runs them: the [[verifier.collect]] hook turns the agent's committed work into
/logs/artifacts/model.patch before the artifacts are collected, and the separate verifier (an image FROM the
task's) applies it to the pristine base and runs the tests. Without the hook every agent would score 0."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from deepswe_factory import GIT_ENV, make_deepswe_task
from harbor_factory import REWARD, add_toml, make_recipe, make_sidecar_task, make_task


def rows_of(run_dir: Path) -> dict[str, dict]:
    return {r["task_id"]: r for r in map(json.loads, (run_dir / "trials.jsonl").read_text().splitlines())}


def validate(cli, tmp_path: Path, env: str, dataset: Path, runs_on_host: bool) -> tuple:
    conf = tmp_path / "conf"
    make_recipe(conf, "dswe", dataset, runs_on_host=runs_on_host)
    run_name = f"dswe-{uuid.uuid4().hex[:8]}"  # unique: the containers' run label is this run's alone
    done = cli("validate", "dswe", "--env", env, "--config-dir", str(conf), "--results-dir", str(tmp_path / "res"),
               "--run-name", run_name)
    run = tmp_path / "res" / run_name
    return done, run / f"dswe__oracle__none__{env}", run / f"dswe__nop__none__{env}"


def check_graded_from_the_patch(oracle_dir: Path, nop_dir: Path, task_id: str) -> None:
    oracle, nop = rows_of(oracle_dir)[task_id], rows_of(nop_dir)[task_id]
    assert oracle["reward"] == 1.0 and nop["reward"] == 0.0, (oracle, nop)
    assert oracle["details"]["environment_mode"] == "separate"
    assert oracle["details"]["collected"]["hooks"][0]["exit_code"] == 0
    attempt = oracle_dir / "tasks" / task_id / "attempt-1"
    patch = (attempt / "artifacts" / "logs" / "artifacts" / "model.patch").read_text()
    assert "-    return a - b\n+    return a + b" in patch, patch
    assert "git diff --binary" in (attempt / "collect.log").read_text()
    # nop committed nothing: the hook wrote an empty patch, which the verifier grades as none submitted.
    nop_attempt = nop_dir / "tasks" / task_id / "attempt-1"
    assert (nop_attempt / "artifacts" / "logs" / "artifacts" / "model.patch").read_text() == ""
    assert "no model.patch submitted" in (nop_attempt / "verifier.log").read_text()


def test_a_deepswe_task_is_graded_from_its_committed_work_on_local(cli, tmp_path):
    dataset = tmp_path / "tasks"
    make_deepswe_task(dataset, "calc-add", None)
    done, oracle_dir, nop_dir = validate(cli, tmp_path, "local", dataset, runs_on_host=True)
    assert done.returncode == 0, done.stderr[-3000:]
    check_graded_from_the_patch(oracle_dir, nop_dir, "calc-add")


@pytest.mark.docker
def test_a_deepswe_task_is_graded_from_its_committed_work_on_docker(cli, base_image, tmp_path):
    """The task names a registry image no registry has: its environment/Dockerfile is built and tagged with
    that name, so the verifier's tests/Dockerfile builds FROM it, as with DeepSWE's images rebuilt locally."""
    dataset = tmp_path / "tasks"
    image = f"agentcompass-test/deepswe-shaped:{uuid.uuid4().hex[:8]}"
    make_deepswe_task(dataset, "calc-add", base_image, image_name=image)
    done, oracle_dir, nop_dir = validate(cli, tmp_path, "docker", dataset, runs_on_host=False)
    try:
        assert done.returncode == 0, done.stderr[-3000:]
        check_graded_from_the_patch(oracle_dir, nop_dir, "calc-add")
        build_log = (oracle_dir / "tasks" / "calc-add" / "attempt-1" / "build.log").read_text()
        assert f"tagged {image}" in build_log, build_log
    finally:
        import subprocess

        subprocess.run(["docker", "image", "rm", "-f", image], capture_output=True)


def test_without_the_hook_the_reference_solution_scores_0_and_validate_says_why(cli, tmp_path):
    """What agentcompass did before it ran hooks: the verifier grades the pristine base. validate names the
    uncollected artifact and the failing hook instead of only "oracle failed"."""
    dataset = tmp_path / "tasks"
    make_deepswe_task(dataset, "no-hook", None, hook=None)
    make_deepswe_task(dataset, "bad-hook", None, hook="mkdir -p /logs/artifacts && cd /app && git diff --binary nosuchcommit HEAD > /logs/artifacts/model.patch")
    done, oracle_dir, _ = validate(cli, tmp_path, "local", dataset, runs_on_host=True)
    assert done.returncode == 1, done.stderr[-3000:]
    lines = {line.split()[0]: line for line in done.stdout.splitlines() if line.split()}
    assert "declared artifact /logs/artifacts/model.patch was never written (a missing [[verifier.collect]] hook?)" \
        in lines["no-hook"], lines["no-hook"]
    assert "collect hook in main" in lines["bad-hook"] and "exit 128" in lines["bad-hook"], lines["bad-hook"]
    rows = rows_of(oracle_dir)
    assert rows["no-hook"]["reward"] == 0.0 and rows["bad-hook"]["reward"] == 0.0  # graded all the same, as Harbor


def test_a_hook_that_times_out_is_logged_and_grading_goes_on(cli, tmp_path):
    dataset, conf = tmp_path / "tasks", tmp_path / "conf"
    task = make_task(dataset, "slow-hook", solve="echo 42 > /app/answer.txt",
                     test=f'if [ "$(cat /app/answer.txt)" = 42 ]; {REWARD}')
    add_toml(task, "[[verifier.collect]]\ncommand = 'echo snapshotting; sleep 300'\ntimeout_sec = 1.0\n")
    make_recipe(conf, "slow", dataset)
    started = time.monotonic()
    done = cli("run", "slow", "oracle", "none", "--env", "local", "--config-dir", str(conf),
               "--results-dir", str(tmp_path / "res"), "--run-name", "r", "--max-retries", "0")
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 150  # the hook was cut at its timeout, not waited out (300 s)
    run_dir = tmp_path / "res" / "r" / "slow__oracle__none__local"
    [row] = rows_of(run_dir).values()
    assert row["reward"] == 1.0 and row["details"]["collected"]["hooks"][0]["timed_out"] is True, row
    log = (run_dir / "tasks" / "slow-hook" / "attempt-1" / "collect.log").read_text()
    assert log.startswith("$ [main] echo snapshotting; sleep 300\nsnapshotting\n") and "[timed out after 1s]" in log, log


def test_local_refuses_a_hook_user_it_cannot_be(cli, tmp_path):
    dataset, conf = tmp_path / "tasks", tmp_path / "conf"
    add_toml(make_task(dataset, "t", solve="true", test="true"),
             '[[verifier.collect]]\ncommand = "true"\nuser = "nobody"\n')
    make_recipe(conf, "hookuser", dataset)
    done = cli("run", "hookuser", "oracle", "none", "--env", "local", "--config-dir", str(conf),
               "--results-dir", str(tmp_path / "res"), "--run-name", "r")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert '[[verifier.collect]] user (in main) = "nobody"' in lines[0] and "local provider" in lines[0]


def test_a_hook_in_a_service_no_compose_file_defines_refuses_the_task_alone(cli, tmp_path):
    """One task the run cannot honour is refused alone: its trial says why, and the others run."""
    dataset, conf = tmp_path / "tasks", tmp_path / "conf"
    add_toml(make_task(dataset, "sidecar-hook", solve="true", test="true"),
             '[[verifier.collect]]\ncommand = "true"\nservice = "db"\n')
    make_task(dataset, "plain", solve="echo 1 > /app/ok", test=f"if [ -f /app/ok ]; {REWARD}")
    make_recipe(conf, "mixed", dataset)
    done = cli("run", "mixed", "oracle", "none", "--env", "local", "--config-dir", str(conf),
               "--results-dir", str(tmp_path / "res"), "--run-name", "r")
    assert done.returncode == 0, done.stderr
    assert "warning: task 'sidecar-hook' is refused on local" in done.stderr
    rows = rows_of(tmp_path / "res" / "r" / "mixed__oracle__none__local")
    assert rows["plain"]["status"] == "passed"
    refused = rows["sidecar-hook"]
    assert refused["status"] == "error" and refused["error_category"] == "infra" and refused["retries"] == 0
    assert refused["message"].startswith("refused: ") and "runs in service 'db'" in refused["message"], refused


# -- on docker: a hook in a sidecar, a hook as another user ------------------------------------------------
@pytest.mark.docker
def test_hooks_in_a_sidecar_and_as_another_user_on_docker(cli, base_image, tmp_path):
    """The sidecar's hook snapshots its state (its request log's count) into a file, collected as an artifact of
    that service for the separate verifier; main's hook runs as the image's user `collector`."""
    dataset = tmp_path / "tasks"
    task = make_sidecar_task(dataset, "sidecar-hook", base_image)
    (task / "environment" / "Dockerfile").write_text(f"FROM {base_image}\nRUN useradd -m collector\nWORKDIR /app\n")
    test = (task / "tests" / "test.sh").read_text().replace(
        "if [", 'if [ "$(cat /var/log/api/count)" -ge 1 ] && [ "$(cat /logs/artifacts/who)" = collector ] && [', 1)
    (task / "tests" / "test.sh").write_text(test)
    toml = (task / "task.toml").read_text().replace(
        '{ source = "/var/log/api/requests.log", service = "api" }',
        '{ source = "/var/log/api/requests.log", service = "api" }, { source = "/var/log/api/count", service = "api" }, '
        '{ source = "/var/log/api/main-state", service = "api" }')
    (task / "task.toml").write_text(toml + textwrap_hooks())
    done, oracle_dir, nop_dir = validate(cli, tmp_path, "docker", dataset, runs_on_host=False)
    assert done.returncode == 0, done.stderr[-3000:]
    oracle = rows_of(oracle_dir)["sidecar-hook"]
    hooks = oracle["details"]["collected"]["hooks"]
    assert [(h["service"], h["exit_code"]) for h in hooks] == [("main", 0), ("api", 0)], hooks  # main's first
    artifacts = oracle_dir / "tasks" / "sidecar-hook" / "attempt-1" / "artifacts"
    assert int((artifacts / "var" / "log" / "api" / "count").read_text()) >= 1
    assert (artifacts / "logs" / "artifacts" / "who").read_text() == "collector\n"
    # The agent's container was stopped before the sidecar's hook ran (a separate verifier grades): its name is gone.
    assert (artifacts / "var" / "log" / "api" / "main-state").read_text() == "stopped\n"


def textwrap_hooks() -> str:
    return ("[[verifier.collect]]\nservice = \"api\"\ncommand = \"grep -c 'GET /secret.txt' /var/log/api/requests.log "
            "> /var/log/api/count; getent hosts main >/dev/null && echo running > /var/log/api/main-state "
            "|| echo stopped > /var/log/api/main-state\"\n"
            "[[verifier.collect]]\ncommand = \"mkdir -p /logs/artifacts && whoami > /logs/artifacts/who\"\nuser = \"collector\"\n")


def test_a_steps_hooks_and_artifacts_are_collected_before_its_grade(cli, tmp_path):
    """Each step's collection pass: the task's hooks then the step's own, the task's artifacts and the step's,
    into steps/NAME/artifacts/ (Harbor's multi_step.py), before the step is graded."""
    from harbor_factory import make_multi_step

    dataset, conf = tmp_path / "tasks", tmp_path / "conf"
    task = make_multi_step(dataset, "steps-collect", None, first_min_reward=1.0)
    toml = (task / "task.toml").read_text().replace(
        '[[steps]]\nname = "two"\n',
        '[[steps]]\nname = "two"\nartifacts = ["/app/two.txt"]\n'
        '[[steps.verifier.collect]]\ncommand = "tail -n1 /app/log.txt > /app/two.txt"\n')
    (task / "task.toml").write_text('artifacts = ["/app/log.txt"]\n' + toml
                                    + '[[verifier.collect]]\ncommand = "wc -l < /app/log.txt > /app/lines.txt"\n')
    make_recipe(conf, "steps", dataset)
    done = cli("run", "steps", "oracle", "none", "--env", "local", "--config-dir", str(conf),
               "--results-dir", str(tmp_path / "res"), "--run-name", "r", "--max-retries", "0")
    assert done.returncode == 0, done.stderr
    attempt = tmp_path / "res" / "r" / "steps__oracle__none__local" / "tasks" / "steps-collect" / "attempt-1"
    assert (attempt / "steps" / "one" / "artifacts" / "app" / "log.txt").read_text() == "first\n"
    assert not (attempt / "steps" / "one" / "artifacts" / "app" / "two.txt").exists()
    assert (attempt / "steps" / "two" / "artifacts" / "app" / "log.txt").read_text() == "first\nsecond\n"
    assert (attempt / "steps" / "two" / "artifacts" / "app" / "two.txt").read_text() == "second\n"
    log = (attempt / "collect.log").read_text()
    assert log.count("$ [main] wc -l") == 2 and log.count("$ [main] tail -n1") == 1, log


def test_a_task_the_env_cannot_honour_is_refused_alone_and_said_once(cli, tmp_path):
    """The env's check refuses one task (a user local cannot be); validate runs the rest and names it once."""
    dataset, conf = tmp_path / "tasks", tmp_path / "conf"
    add_toml(make_task(dataset, "other-user", solve="true", test="true"), '[agent]\nuser = "nobody"\n')
    make_task(dataset, "plain", solve="echo 1 > /app/ok", test=f"if [ -f /app/ok ]; {REWARD}")
    make_recipe(conf, "mixed", dataset)
    done = cli("validate", "mixed", "--config-dir", str(conf), "--results-dir", str(tmp_path / "res"), "--run-name", "v")
    assert done.returncode == 1, done.stderr  # the refused task breaks the rule; plain keeps it
    assert done.stderr.count("warning: task 'other-user' is refused on local") == 1, done.stderr
    lines = {line.split()[0]: line for line in done.stdout.splitlines() if line.split()}
    assert lines["plain"].endswith("ok") and "error (infra)" in lines["other-user"], lines
    rows = rows_of(tmp_path / "res" / "v" / "mixed__oracle__none__local")
    assert '[agent] user = "nobody"' in rows["other-user"]["message"] and rows["plain"]["status"] == "passed"


# -- on modal (the fake SDK, bound to the real one's signatures): a main hook is a command like any other -----
from modal_sdk import modal_cli, real_modal  # noqa: E402,F401  (fixtures)


def test_a_main_hook_runs_on_modal(modal_cli, tmp_path):
    dataset, conf = tmp_path / "tasks", tmp_path / "conf"
    task = make_task(dataset, "hooked", solve="echo 42 > /app/answer.txt",
                     test=f'if [ "$(cat /logs/artifacts/snap 2>/dev/null)" = 42 ]; {REWARD}',
                     dockerfile="FROM agentcompass/base:bookworm\nWORKDIR /app\n")
    add_toml(task, '[[verifier.collect]]\ncommand = "mkdir -p /logs/artifacts && cp /app/answer.txt /logs/artifacts/snap"\n')
    make_recipe(conf, "hooked", dataset, runs_on_host=False)
    run, sdk = modal_cli("run", "hooked", "oracle", "none", "--env", "modal", "--config-dir", str(conf),
                         "--results-dir", str(tmp_path / "res"), "--run-name", "m", "--max-retries", "0",
                         env={"MODAL_TOKEN_ID": "ak-test", "MODAL_TOKEN_SECRET": "as-test"})
    assert run.returncode == 0, run.stderr
    [row] = rows_of(tmp_path / "res" / "m" / "hooked__oracle__none__modal").values()
    assert row["reward"] == 1.0 and row["details"]["collected"]["hooks"][0]["exit_code"] == 0, row
    assert any("cp /app/answer.txt /logs/artifacts/snap" in json.dumps(c) for c in sdk if c["call"] == "Sandbox.exec")


@pytest.mark.parametrize("scrub", [True, False])
def test_the_upstream_fix_in_the_images_history_is_gone_before_the_agent_starts(cli, tmp_path, scrub):
    """The task's repository carries the fix as a later commit (tagged, then reset away, packed). With the
    recipe's scrub_git_history (deepswe.yaml sets it) the agent's `git log --all`, tags and reflog find only the
    base, and the honest solution still scores 1; without it (Harbor's way) the fix is one command away."""
    dataset = tmp_path / "tasks"
    task = make_deepswe_task(dataset, "calc-add", None)
    workspace = task / "environment" / "workspace"
    env = {**os.environ, **GIT_ENV}
    (workspace / "calc.py").write_text("def add(a, b):\n    return a + b  # FUTURE-FIX\n")
    for args in (["commit", "-qam", "FUTURE-FIX upstream"], ["tag", "v2"], ["gc", "-q"], ["reset", "-q", "--hard", "HEAD~1"]):
        subprocess.run(["git", *args], cwd=workspace, env=env, check=True)
    solve = (task / "solution" / "solve.sh").read_text()
    looks = "{ git log --all --oneline; git tag; git reflog; git show v2 2>&1; } > /app/seen.txt\n"
    (task / "solution" / "solve.sh").write_text(solve.replace("git add -A\n", looks + "git add -A\n"))
    conf = tmp_path / "conf"
    make_recipe(conf, "dswe", dataset, extra=f"params:\n  scrub_git_history: {str(scrub).lower()}\n")
    done = cli("run", "dswe", "oracle", "none", "--env", "local", "--config-dir", str(conf),
               "--results-dir", str(tmp_path / "res"), "--run-name", "scrub")
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = tmp_path / "res" / "scrub" / "dswe__oracle__none__local"
    assert rows_of(run_dir)["calc-add"]["reward"] == 1.0
    patch = (run_dir / "tasks" / "calc-add" / "attempt-1" / "artifacts" / "logs" / "artifacts" / "model.patch").read_text()
    seen = "".join(line[1:] for line in patch.splitlines(keepends=True) if line.startswith("+") and "seen.txt" not in line)
    assert " base" in seen
    assert ("FUTURE" in seen) is not scrub, seen
