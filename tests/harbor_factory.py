"""Builds Harbor-format datasets and recipes for tests and benchmarks."""

from __future__ import annotations

import base64
import hashlib
import re
import textwrap
import zipfile
from pathlib import Path


def make_task(root: Path, task_id: str, solve: str, test: str, dockerfile: str | None = None,
              agent_timeout: float = 60, verify_timeout: float = 60, instruction: str = "Make the tests pass.") -> Path:
    """One task dir; `test` is bash that must write /logs/verifier/reward.txt."""
    task = root / task_id
    for sub in ("environment", "tests", "solution"):
        (task / sub).mkdir(parents=True, exist_ok=True)
    (task / "task.toml").write_text(textwrap.dedent(f"""\
        version = "1.0"
        [metadata]
        description = "{task_id}"
        [agent]
        timeout_sec = {agent_timeout}
        [verifier]
        timeout_sec = {verify_timeout}
        [environment]
        workdir = "/app"
        """))
    (task / "instruction.md").write_text(instruction + "\n")
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\n" + solve + "\n")
    (task / "tests" / "test.sh").write_text("#!/bin/bash\nmkdir -p /logs/verifier\n" + test + "\n")
    if dockerfile is not None:
        (task / "environment" / "Dockerfile").write_text(dockerfile)
    return task


def make_file_tasks(root: Path, count: int, solve_extra: str = "", prefix: str = "t") -> list[str]:
    """Tasks solved by writing /app/answer.txt; the verifier checks it."""
    ids = []
    for i in range(count):
        task_id = f"{prefix}{i:03d}"
        make_task(
            root, task_id,
            solve=f"{solve_extra}\necho {task_id} > /app/answer.txt",
            test=f'if [ "$(cat /app/answer.txt 2>/dev/null)" = "{task_id}" ]; then echo 1; else echo 0; fi'
                 " > /logs/verifier/reward.txt",
        )
        ids.append(task_id)
    return ids


def make_recipe(config_dir: Path, name: str, dataset: Path, runs_on_host: bool = True, extra: str = "") -> Path:
    """A user config dir recipe pointing at a generated dataset (YAML only, as users write it)."""
    path = config_dir / "recipes" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"name: {name}\ndescription: generated for tests\nformat: harbor\n"
                    f"source: {{path: {dataset}}}\nruns_on_host: {str(runs_on_host).lower()}\n{extra}")
    return path


def add_toml(task: Path, text: str) -> Path:
    """Merge TOML text into a task's task.toml: top-level keys first, a table's keys into that table."""
    path = task / "task.toml"
    toml = path.read_text()
    chunks = re.split(r"(?m)^(?=\[)", textwrap.dedent(text))
    top, tables = chunks[0], chunks[1:]
    for chunk in tables:
        header, _, body = chunk.partition("\n")
        if not header.startswith("[[") and f"\n{header}\n" in f"\n{toml}":
            toml = toml.replace(f"{header}\n", f"{header}\n{body}", 1)
        else:
            toml += chunk if chunk.endswith("\n") else chunk + "\n"
    path.write_text(top + toml)
    return task


# -- fixtures in the spirit of Harbor's examples/tasks, one per task.toml feature ------------------
REWARD = "then echo 1; else echo 0; fi > /logs/verifier/reward.txt"
USERS_DOCKERFILE = ("RUN useradd -m agent && useradd -m checker && mkdir -p /app && chown agent /app\nWORKDIR /app\n")


def schema_fixtures(root: Path, base_image: str | None) -> list[str]:
    """hello-user, hello-healthcheck, hello-multi-step, network-policy: Harbor schema fields each task needs.
    With a base image each builds FROM it (docker); without, they run on the host (local)."""
    dockerfile = f"FROM {base_image}\n{USERS_DOCKERFILE}" if base_image else None
    make = lambda task_id, solve, test, toml: add_toml(  # noqa: E731
        make_task(root, task_id, solve=solve, test=test, dockerfile=dockerfile), toml)
    ids = []
    if base_image:  # users exist only in an image of the task's own
        make("hello-user", "whoami > /app/who.txt && touch /app/made",
             f'if [ "$(cat /app/who.txt)" = agent ] && [ "$(stat -c %U /app/made)" = agent ] && [ "$(whoami)" = checker ]; {REWARD}',
             '[agent]\nuser = "agent"\n[verifier]\nuser = "checker"\n')
        # Harbor's separate-verifier: a fresh sandbox of the tests' own image gets only the artifacts.
        task = make("separate-verifier", "echo 42 > /app/answer.txt",
                    f'if [ "$(cat /app/answer.txt)" = 42 ] && [ "$(whoami)" = checker ]; {REWARD}',
                    'artifacts = ["/app/answer.txt"]\n[verifier]\nenvironment_mode = "separate"\nuser = "checker"\n')
        (task / "tests" / "Dockerfile").write_text(f"FROM {base_image}\nRUN useradd -m checker\nCOPY test.sh /tests/test.sh\n")
        make_sidecar_task(root, "sidecar-artifacts", base_image)
        # Harbor's hello-skills: the image holds a skill at skills_dir, which a skill-aware agent is handed.
        task = make("hello-skills", "bash /skills/greet/greet.sh world > /app/greeting.txt",
                    f'if [ "$(cat /app/greeting.txt)" = "hello, world" ]; {REWARD}', '[environment]\nskills_dir = "/skills"\n')
        (task / "environment" / "Dockerfile").write_text(f"FROM {base_image}\nCOPY skills/ /skills/\nWORKDIR /app\n")
        (task / "environment" / "skills" / "greet").mkdir(parents=True)
        (task / "environment" / "skills" / "greet" / "SKILL.md").write_text(
            "---\nname: greet\ndescription: greets someone\n---\nRun `bash /skills/greet/greet.sh NAME`.\n")
        (task / "environment" / "skills" / "greet" / "greet.sh").write_text('echo "hello, $1"\n')
        ids += ["hello-user", "separate-verifier", "sidecar-artifacts", "hello-skills"]
    # The interfaces of the command's own network namespace (/proc/net/dev, unlike /sys, is the namespace's).
    interfaces = "awk -F: 'NR > 2 {gsub(/ /, \"\", $1); print $1}' /proc/net/dev"
    make("network-policy", f"{interfaces} > /app/agent-net",
         f'if [ "$(cat /app/agent-net)" = lo ] && {interfaces} | grep -qv "^lo$"; {REWARD}',
         '[agent]\nnetwork_mode = "no-network"\n[verifier]\nnetwork_mode = "public"\n')
    ids.append("network-policy")
    # Healthy on the third try: the agent sees the count the healthcheck left.
    probe = 'n=$(cat /tmp/hc 2>/dev/null || echo 0); echo $((n + 1)) > /tmp/hc; [ "$n" -ge 2 ]'
    make("hello-healthcheck", "cp /tmp/hc /app/seen",
         f'if [ "$(cat /app/seen 2>/dev/null)" = 3 ]; {REWARD}',
         f"[environment.healthcheck]\ncommand = '{probe}'\ninterval_sec = 0.1\nretries = 3\n")
    ids.append("hello-healthcheck")
    make_multi_step(root, "hello-multi-step", dockerfile, first_min_reward=1.0)
    ids.append("hello-multi-step")
    return ids


def make_multi_step(root: Path, task_id: str, dockerfile: str | None, first_min_reward: float) -> Path:
    """Two steps, each appending its line to /app/log.txt and checking the last line."""
    task = add_toml(make_task(root, task_id, solve="true", test="exit 1", dockerfile=dockerfile),
                    f'[[steps]]\nname = "one"\nmin_reward = {first_min_reward}\n[[steps]]\nname = "two"\n')
    for step, line in (("one", "first"), ("two", "second")):
        (task / "steps" / step / "solution").mkdir(parents=True)
        (task / "steps" / step / "tests").mkdir()
        (task / "steps" / step / "instruction.md").write_text(f"Append the line '{line}' to /app/log.txt.\n")
        (task / "steps" / step / "solution" / "solve.sh").write_text(f"echo {line} >> /app/log.txt\n")
        (task / "steps" / step / "tests" / "test.sh").write_text(
            f'echo "checking step {step}"\nif [ "$(tail -n1 /app/log.txt 2>/dev/null)" = {line} ]; {REWARD}\n')
    return task


# -- a task with a docker-compose sidecar, in the spirit of Harbor's sidecar-artifacts ----------------
SECRET = "sidecar-says-42"
SIDECAR_COMPOSE = """\
services:
  main:
    depends_on:
      api:
        condition: service_healthy
  api:
    build:
      context: ./api
    healthcheck:
      test: ["CMD-SHELL", "python3 -c 'import urllib.request as u; u.urlopen(\\"http://localhost:8000/health.txt\\")'"]
      interval: 1s
      retries: 30
"""


def make_sidecar_task(root: Path, task_id: str, base_image: str) -> Path:
    """The agent fetches a value from the `api` sidecar (reached by its service name, after its healthcheck
    passed); a separate verifier checks the value and the sidecar's request log, an artifact of service api."""
    task = make_task(root, task_id, dockerfile=f"FROM {base_image}\nWORKDIR /app\n",
                     solve="python3 -c 'import urllib.request as u; print(u.urlopen(\"http://api:8000/secret.txt\").read().decode().strip())'"
                           " > /app/answer.txt",
                     test=f'if [ "$(cat /app/answer.txt)" = {SECRET} ] && grep -q "GET /secret.txt" /var/log/api/requests.log; {REWARD}')
    add_toml(task, 'artifacts = ["/app/answer.txt", { source = "/var/log/api/requests.log", service = "api" }]\n'
                   '[verifier]\nenvironment_mode = "separate"\n')
    (task / "tests" / "Dockerfile").write_text(f"FROM {base_image}\nCOPY test.sh /tests/test.sh\n")
    (task / "environment" / "docker-compose.yaml").write_text(SIDECAR_COMPOSE)
    api = task / "environment" / "api"
    api.mkdir()
    (api / "Dockerfile").write_text(
        f"FROM {base_image}\nRUN mkdir -p /srv /var/log/api && echo ok > /srv/health.txt && echo {SECRET} > /srv/secret.txt\n"
        'CMD ["sh", "-c", "exec python3 -u -m http.server 8000 --directory /srv 2>>/var/log/api/requests.log"]\n')
    return task


# -- honest controls of verdict integrity in the shared verifier mode: graded exactly as Harbor grades them ----
CONTROL_SECRET = "the-agent-never-sees-this-7d41"
DEBIAN_SITE = "/usr/local/lib/python3.11/dist-packages"  # where pip installs for the base image's python3
HONEST_CONTROLS = ("server-left-running", "pip-installed-package", "non-root-agent", "shared-default",
                   "multistep-all-shared")


def honest_wheel(path: Path, secret: str = CONTROL_SECRET) -> None:
    """A wheel laid out as pip installs it: a package, and a .pth with an import line (as setuptools'
    distutils-precedence.pth) that its RECORD lists."""
    files = {"answerpkg/__init__.py": f"ANSWER = {secret!r}\n",
             "answerpkg-precedence.pth": "import os; os.environ.setdefault('ANSWERPKG', '1')\n",
             "answerpkg-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: answerpkg\nVersion: 1.0\n",
             "answerpkg-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    lines = [f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b'=').decode()},"
             f"{len(text.encode())}" for name, text in files.items()]
    files["answerpkg-1.0.dist-info/RECORD"] = "\n".join([*lines, "answerpkg-1.0.dist-info/RECORD,,"]) + "\n"
    with zipfile.ZipFile(path, "w") as wheel:
        for name, text in files.items():
            wheel.writestr(name, text)


def honest_controls(root: Path, base_image: str) -> list[str]:
    """A server the agent leaves running for the tests, a package installed as pip lays it out (with a recorded
    .pth that imports), a non-root agent, and /logs as Harbor's verifier-mode-matrix examples check it
    (shared-default, multistep-all-shared): solvable tasks every one of which Harbor passes."""
    dockerfile, secret = f"FROM {base_image}\nWORKDIR /app\n", CONTROL_SECRET
    reward = "&& echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt"
    make_task(root, "server-left-running",
              solve=f"mkdir -p /tmp/www && echo {secret} > /tmp/www/answer && "
                    "(nohup python3 -m http.server 8123 --directory /tmp/www >/dev/null 2>&1 &) && sleep 1",
              test="python3 -c \"import urllib.request as u, sys; "
                   f"sys.exit(0 if u.urlopen('http://127.0.0.1:8123/answer').read().decode().strip() == '{secret}' else 1)\" "
                   + reward, dockerfile=dockerfile)
    task = make_task(root, "pip-installed-package",
                     solve=f"python3 -m zipfile -e /solution/answerpkg-1.0-py3-none-any.whl {DEBIAN_SITE}/",
                     test="python3 -c \"import os, sys, answerpkg; "
                          f"sys.exit(0 if answerpkg.ANSWER == '{secret}' and os.environ.get('ANSWERPKG') == '1' else 1)\" "
                          + reward, dockerfile=dockerfile)
    honest_wheel(task / "solution" / "answerpkg-1.0-py3-none-any.whl")
    who_and_answer = ('[ "$(cat /logs/agent/who)" = nobody ] && python3 -c "import sys; '
                      f"sys.exit(0 if open('/tmp/answer').read().strip() == '{secret}' else 1)\"")
    add_toml(make_task(root, "non-root-agent", solve=f"echo {secret} > /tmp/answer && whoami > /logs/agent/who",
                       test=f"if {who_and_answer}; {REWARD}", dockerfile=dockerfile), '[agent]\nuser = "nobody"\n')
    # shared-default: the agent's environment holds the three /logs folders Harbor mounts, and what the agent
    # leaves in /logs/artifacts reaches the verifier.
    layout = "test -d /logs/agent && test -d /logs/verifier && test -w /logs/verifier && test -d /logs/artifacts"
    make_task(root, "shared-default", solve=f"{layout} && echo seen > /logs/artifacts/layout",
              test=f'if [ "$(cat /logs/artifacts/layout 2>/dev/null)" = seen ]; {REWARD}', dockerfile=dockerfile)
    # multistep-all-shared: every step's agent sees the same layout (a non-root one here, for whom the folders
    # must be writable again after the step before's verifier kept them to itself).
    task = add_toml(make_task(root, "multistep-all-shared", solve="true", test="exit 1", dockerfile=dockerfile),
                    '[agent]\nuser = "nobody"\n[[steps]]\nname = "one"\nmin_reward = 1.0\n[[steps]]\nname = "two"\n')
    for step in ("one", "two"):
        (task / "steps" / step / "solution").mkdir(parents=True)
        (task / "steps" / step / "tests").mkdir()
        (task / "steps" / step / "instruction.md").write_text("Leave a mark in /logs/artifacts.\n")
        (task / "steps" / step / "solution" / "solve.sh").write_text(
            f"{layout} && touch /logs/verifier/agent-can-write && echo {step} > /logs/artifacts/{step}\n")
        (task / "steps" / step / "tests" / "test.sh").write_text(
            f'if [ "$(cat /logs/artifacts/{step} 2>/dev/null)" = {step} ]; {REWARD}\n')
    return list(HONEST_CONTROLS)
