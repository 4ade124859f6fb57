"""What the Terminal-Bench test modules share: the fixture datasets, a task directory writer, and a run on the host
with its trials by task."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path


DATA = Path(__file__).resolve().parent / "data"
TB1 = DATA / "terminal_bench"
TB2 = DATA / "terminal_bench_2"
HEADER_LINE = "=========================== short test summary info ============================"


def host_overlay(tmp_path: Path) -> Path:
    """--config overlay that lets the fixture tasks run on the host: pytest from this interpreter."""
    path = tmp_path / "host.yaml"
    path.write_text(f"benchmark:\n  runs_on_host: true\n  env: {{PYTHON: {sys.executable}}}\n")
    return path


def trials(run_dir: Path) -> dict[str, dict]:
    rows = [json.loads(line) for line in (run_dir / "trials.jsonl").read_text().splitlines()]
    return {row["task_id"]: row for row in rows}

def write_task(root: Path, name: str, compose: str | None = None, dockerfile: str | None = "FROM x\n",
               task_yaml: str = "instruction: do it\n", files: dict[str, str] | None = None) -> Path:
    task = root / name
    task.mkdir(parents=True)
    (task / "task.yaml").write_text(task_yaml)
    if dockerfile is not None:
        (task / "Dockerfile").write_text(dockerfile)
    if compose is not None:
        (task / "docker-compose.yaml").write_text(textwrap.dedent(compose))
    for rel, text in (files or {}).items():
        (task / rel).parent.mkdir(parents=True, exist_ok=True)
        (task / rel).write_text(textwrap.dedent(text))
    return task


def run_host(cli, tmp_path: Path, dataset: Path, harness: str, *extra: str, env: dict[str, str] | None = None) -> dict:
    run_name = f"{harness}-{len(list(tmp_path.glob('res/*')))}"
    done = cli("run", "terminal_bench", harness, "none", "--config", str(host_overlay(tmp_path)),
               "--benchmark-params", json.dumps({"path": str(dataset)}), "--results-dir", str(tmp_path / "res"),
               "--run-name", run_name, *extra, env=env)
    assert done.returncode == 0, done.stderr
    return trials(next((tmp_path / "res" / run_name).iterdir()))


def verdict_script(condition: str) -> str:
    """A run-tests.sh for the swebench parser: PASSED when the shell condition holds."""
    return f"""#!/bin/bash
        echo "SWEBench results starts here"
        if {condition}; then echo PASSED; else echo FAILED; fi
        echo "SWEBench results ends here"
        """


def python_repl_files() -> dict[str, str]:
    """Keystrokes typed into a Python REPL, as a terminal would take them, checked in the official tests shell
    (root, a login shell on a 160-column terminal)."""
    return {
        "solution.yaml": """
            - command: python3
              min_timeout_sec: 2
            - command: open('/app/out.txt', 'w').write('typed' + ' into python')
              min_timeout_sec: 0.5
            - command: C-d
              append_enter: false
              min_timeout_sec: 1
            - command: echo back in bash > /app/after.txt
              block: true
            """,
        "run-tests.sh": verdict_script('[ "$(cat /app/out.txt)" = "typed into python" ] && [ -f /app/after.txt ] '
                                       '&& [ "$(id -u)" = 0 ] && [ "$(tput cols)" = 160 ]')}


TWO_SERVICES = """
services:
  client:
    build:
      context: .
      args: {{GREETING: "${{T_BENCH_GREETING:-from build args}}"}}
    image: ${{T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME}}
    container_name: ${{T_BENCH_TASK_DOCKER_CLIENT_CONTAINER_NAME}}
    command: ["sh", "-c", "echo the compose command ran > /tmp/command-ran; sleep infinity"]
    environment:
      - TEST_DIR=${{T_BENCH_TEST_DIR}}
    volumes:
      - ${{T_BENCH_TASK_LOGS_PATH}}:${{T_BENCH_CONTAINER_LOGS_PATH}}
      - ${{T_BENCH_TASK_AGENT_LOGS_PATH}}:${{T_BENCH_CONTAINER_AGENT_LOGS_PATH}}
      - shared:/shared
    tmpfs:
      - /scratch:size=1m
    deploy:
      resources:
        limits: {{memory: 256M}}
    depends_on:
      server: {{condition: service_healthy}}
  server:
    image: {base}
    command: ["sh", "-c", "sleep 3 && echo 42 > /shared/answer.txt && cd /shared && exec python3 -m http.server 8000"]
    volumes:
      - shared:/shared
    healthcheck:
      test: ["CMD", "python3", "-c", "import urllib.request as u; u.urlopen('http://localhost:8000/answer.txt')"]
      interval: 500ms
      retries: 60
"""


CLIENT_DOCKERFILE = """FROM {base}
ARG GREETING
RUN echo "$GREETING" > /greeting
WORKDIR /app
"""


# Ask the server service for its answer, once: its healthcheck was waited for before the client started.
FETCH = "python3 -c 'import urllib.request as u; print(u.urlopen(\"http://server:8000/answer.txt\").read().decode().strip())'"


SLOW_RUN_TESTS = """#!/bin/bash
echo "=========================== short test summary info ============================"
echo "PASSED tests/test_outputs.py::test_it"
sleep 30
"""
