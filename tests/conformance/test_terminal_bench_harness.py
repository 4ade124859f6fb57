"""terminal-bench 0.2.18's own harness (`tb run`, as its users run it) with its oracle and nop agents on the
suite's small Terminal-Bench 1 tasks on docker, vs `agentcompass run terminal_bench oracle|nop none --env docker`
on the same task directories: the same verdict per task, and the same parsed tests where both parsed some.

The tasks are those tests/test_terminal_bench.py runs: the two fixture tasks of tests/data/terminal_bench and
the ones its docker tests build (tmux shells with and without run_tests_in_same_shell, keystrokes into a
Python REPL, a non-root image user, a two-service compose file, an agent timeout followed by a test timeout).
The official harness needs tmux and asciinema in the image (every official task's base image has them), so
the tasks build on a local image with both; the fixture tasks are also run as they are, without tmux (and
count-lines without a docker-compose.yaml), where the official harness cannot start them.
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
from conftest import run_cli
from terminal_bench_tasks import (CLIENT_DOCKERFILE, FETCH, SLOW_RUN_TESTS, TB1, TWO_SERVICES, python_repl_files,
                                  verdict_script, write_task)

ANCHOR = "terminal-bench 0.2.18"
# Built once and kept (by tag) like the suite's other test images; the official cleanup (`compose down
# --rmi all`) removes only the tasks' own images, never this base.
TOOLS_IMAGE = "agentcompass-conformance/terminal-bench-tools:1"
TOOLS_DOCKERFILE = """FROM {base}
RUN apt-get update && apt-get install -y --no-install-recommends tmux asciinema python3-pytest \\
 && rm -rf /var/lib/apt/lists/*
"""


@pytest.fixture(scope="module")
def tools_image(base_image: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    if subprocess.run(["docker", "image", "inspect", TOOLS_IMAGE], capture_output=True).returncode != 0:
        context = tmp_path_factory.mktemp("tb-tools")
        (context / "Dockerfile").write_text(TOOLS_DOCKERFILE.format(base=base_image))
        built = subprocess.run(["docker", "build", "-q", "-t", TOOLS_IMAGE, str(context)], capture_output=True, text=True)
        assert built.returncode == 0, built.stderr[-2000:]
    return TOOLS_IMAGE


# docker compose refuses a service's named volume that the file does not declare at its top level.
COMPOSE_VOLUMES = "volumes:\n  shared: {}\n"


@pytest.fixture
def server_image(base_image: str):
    """A tag of the test's own for the web-client task's `server` service: the official cleanup (`docker compose
    down --rmi all`) removes every service's image, which must never be the shared base image. Tagged anew
    before each run (the previous official run removed it), removed at the end."""
    tag = f"agentcompass-conformance/terminal-bench-server:{uuid.uuid4().hex[:8]}"
    retag = lambda: subprocess.run(["docker", "tag", base_image, tag], check=True, capture_output=True)  # noqa: E731
    yield tag, retag
    subprocess.run(["docker", "rmi", tag], capture_output=True)


def official_template_compose(python: Path) -> str:
    """The docker-compose.yaml `tb tasks create` gives a task (terminal-bench's template task)."""
    return subprocess.run([str(python), "-c", "import terminal_bench, pathlib; print((pathlib.Path(terminal_bench.__file__)"
                           ".parent / 'cli' / 'template-task' / 'docker-compose.yaml').read_text(), end='')"],
                          capture_output=True, text=True, check=True).stdout


def build_dataset(root: Path, image: str, server: str, template_compose: str) -> None:
    # `difficulty` is the one key terminal-bench's Task model requires (a task without it stops `tb run`).
    swebench = "instruction: x\ndifficulty: easy\nparser_name: swebench\n"
    # The fixture tasks as they are (no tmux; count-lines has no docker-compose.yaml) ...
    shutil.copytree(TB1 / "greeting-file", root / "greeting-file-no-tmux")
    shutil.copytree(TB1 / "count-lines", root / "count-lines-bare")
    # ... and on the image with tmux, count-lines with the official template's compose file.
    for name in ("greeting-file", "count-lines"):
        shutil.copytree(TB1 / name, root / name)
        dockerfile = root / name / "Dockerfile"
        dockerfile.write_text(dockerfile.read_text().replace("FROM agentcompass/base:bookworm", f"FROM {image}"))
    (root / "count-lines" / "docker-compose.yaml").write_text(template_compose)
    tmux = f"FROM {image}\nWORKDIR /app\n"
    for name, same_shell in (("same-shell", "true"), ("fresh-shell", "false")):
        write_task(root, name, dockerfile=tmux, task_yaml=f"{swebench}run_tests_in_same_shell: {same_shell}\n",
                   compose=template_compose, files={"solution.yaml": "- command: export SECRET_WORD=xyzzy\n",
                                                    "run-tests.sh": verdict_script('[ "$SECRET_WORD" = xyzzy ]')})
    write_task(root, "python-repl", dockerfile=tmux, task_yaml=swebench, compose=template_compose,
               files=python_repl_files())
    write_task(root, "non-root", dockerfile=f"FROM {image}\nRUN useradd -m player\nUSER player\n",
               task_yaml=swebench, compose=template_compose,
               files={"solution.sh": "id -un > /tmp/agent-user; pwd > /tmp/agent-cwd\n",
                      "run-tests.sh": verdict_script('[ "$(cat /tmp/agent-user)" = player ] && [ "$(cat /tmp/agent-cwd)" = / ] '
                                                     '&& [ "$(id -u)" = 0 ] && [ "$PWD" = / ]')})
    write_task(root, "web-client", dockerfile=CLIENT_DOCKERFILE.format(base=image),
               compose=TWO_SERVICES.format(base=server) + COMPOSE_VOLUMES, task_yaml=swebench,
               files={"solution.sh": f"{FETCH} > /app/fetched.txt\n",
                      "run-tests.sh": verdict_script(
                          f'[ "$(cat /app/fetched.txt)" = 42 ] && [ "$({FETCH})" = 42 ] && [ -f /tmp/command-ran ] '
                          '&& [ "$(cat /greeting)" = "from build args" ] && [ -d /logs ] && [ -d /agent-logs ]')})
    write_task(root, "slow-tests", dockerfile=tmux, compose=template_compose,
               task_yaml="instruction: wait\ndifficulty: easy\nmax_agent_timeout_sec: 5\nmax_test_timeout_sec: 8\n",
               files={"solution.sh": "sleep 20\n", "run-tests.sh": SLOW_RUN_TESTS})


# Tasks the official harness cannot start, and the documented difference each shows.
DELIBERATE = {"greeting-file-no-tmux": "terminal-bench-images-without-tmux",
              "count-lines-bare": "terminal-bench-images-without-tmux",
              "non-root": "terminal-bench-non-root-image-user"}


def official_run(python: Path, dataset: Path, agent: str, out: Path, env: dict[str, str]) -> dict[str, dict]:
    tb = python.parent / "tb"
    done = subprocess.run([str(tb), "run", "--dataset-path", str(dataset), "--agent", agent, "--output-path", str(out),
                           "--run-id", agent, "--n-concurrent", "4"],
                          capture_output=True, text=True, timeout=1800, cwd=out,
                          env={**os.environ, **env, "PYTHONPATH": "", "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    results = json.loads((out / agent / "results.json").read_text())["results"]
    return {row["task_id"]: row for row in results}


def our_run(dataset: Path, harness: str, out: Path) -> dict[str, dict]:
    run_name = f"conf-tb-{uuid.uuid4().hex[:8]}"  # container names derive from it, on a shared engine
    done = run_cli("run", "terminal_bench", harness, "none", "--env", "docker", "--task-concurrency", "4",
                   "--benchmark-params", json.dumps({"path": str(dataset)}), "--results-dir", str(out),
                   "--run-name", run_name, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    [trials] = (out / run_name).glob("*/trials.jsonl")
    return {row["task_id"]: row for row in map(json.loads, trials.read_text().splitlines())}


def parsed(tests: dict[str, str] | None) -> dict[str, str] | None:
    return None if tests is None else {name: "passed" if status == "passed" else "failed" for name, status in tests.items()}


@pytest.mark.docker
def test_the_official_oracle_and_nop_give_our_verdicts(tools_image, server_image, compose_v2_env, tmp_path, tally,
                                                       allowed):
    python = anchor_python(ANCHOR)
    dataset = tmp_path / "tasks"
    server, retag = server_image
    build_dataset(dataset, tools_image, server, official_template_compose(python))
    found: dict[str, list[str]] = {"terminal-bench/harness-verdict": [], "terminal-bench/harness-tests": [],
                                   **{key: [] for key in DELIBERATE.values()}}
    same = total = 0
    for agent in ("oracle", "nop"):
        (tmp_path / f"official-{agent}").mkdir()
        retag()
        theirs = official_run(python, dataset, agent, tmp_path / f"official-{agent}", compose_v2_env)
        retag()
        ours = our_run(dataset, agent, tmp_path / f"ours-{agent}")
        assert sorted(theirs) == sorted(ours) == sorted(p.name for p in dataset.iterdir())
        for task, row in sorted(theirs.items()):
            total += 1
            official = bool(row["is_resolved"])
            mine = ours[task]["status"] == "passed"
            case = (f"{agent} {task}: official resolved={official} ({row['failure_mode']}), "
                    f"ours {ours[task]['status']} ({ours[task].get('details', {}).get('failure_mode', '')}"
                    f"{' ' + str(ours[task].get('message', ''))[:300] if ours[task]['status'] == 'error' else ''})")
            if official != mine:
                found[DELIBERATE.get(task, "terminal-bench/harness-verdict")].append(case)
            elif row["parser_results"] is not None and "tests" in ours[task].get("details", {}) and \
                    parsed(row["parser_results"]) != parsed(ours[task]["details"]["tests"]):
                found["terminal-bench/harness-tests"].append(f"{case}: {row['parser_results']} vs {ours[task]['details']['tests']}")
            else:
                same += 1
    # The official verdicts the tasks were written for: a check that the official harness really ran them.
    assert theirs["greeting-file"]["parser_results"] == {"test_file_exists": "failed", "test_file_content": "failed"}
    tally.record(ANCHOR, "oracle/nop verdicts (tb run on docker)", same, total)
    check_divergences(found, allowed)
