"""A small task shaped as DeepSWE's are (datacurve-ai/deep-swe, schema 1.3): a git repository at a base
commit; a reference solution that commits its change; a [[verifier.collect]] hook writing the committed work
as /logs/artifacts/model.patch; a separate verifier whose image is built FROM the task's image and applies
that patch to the pristine base before running the tests (DeepSWE's test.sh + grader.py, in miniature)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

GIT_ENV = {"GIT_AUTHOR_NAME": "base", "GIT_AUTHOR_EMAIL": "base@example.org", "GIT_COMMITTER_NAME": "base",
           "GIT_COMMITTER_EMAIL": "base@example.org", "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
           "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}

BUGGY = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"

SOLVE = f"""\
#!/bin/bash
cd /app
cat > calc.py <<'EOF'
{FIXED}EOF
# Commit the solution like a normal submission (only committed work is graded).
git checkout -b feature/solution 2>/dev/null || true
git add -A
git -c user.name=oracle -c user.email=oracle@local commit -q --no-verify -m "Apply reference solution"
"""

# DeepSWE's frame: no patch, or one that does not apply, is graded 0 without running the tests.
TEST = """\
#!/bin/bash
mkdir -p /logs/verifier
cd /app || exit 6
if [ ! -s /logs/artifacts/model.patch ]; then
  echo "no model.patch submitted"; echo 0 > /logs/verifier/reward.txt; exit 0
fi
if ! git apply --whitespace=nowarn /logs/artifacts/model.patch; then
  echo "model.patch does not apply"; echo 0 > /logs/verifier/reward.txt; exit 0
fi
cp /tests/test_calc.py . && python3 test_calc.py && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt
"""

TEST_CALC = "from calc import add\nassert add(2, 3) == 5, add(2, 3)\nprint('tests pass')\n"


def base_repository(workspace: Path) -> str:
    """The repository at its base commit (fixed dates: the same commit every time); its hash."""
    workspace.mkdir(parents=True)
    (workspace / "calc.py").write_text(BUGGY)
    env = {**os.environ, **GIT_ENV}
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "base"]):
        subprocess.run(["git", *args], cwd=workspace, env=env, check=True)
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=workspace, check=True, capture_output=True,
                          text=True).stdout.strip()


def hook_command(base: str) -> str:
    """DeepSWE's own collect command, with the task's base commit."""
    return (f"cd /app && mkdir -p /logs/artifacts && git config --global --add safe.directory /app && "
            f"git diff --binary {base} HEAD > /logs/artifacts/model.patch")


def make_deepswe_task(root: Path, task_id: str, base_image: str | None, image_name: str | None = None,
                      hook: str | None = "deepswe", hook_timeout: float = 300.0) -> Path:
    """With a base image, docker-shaped: environment/Dockerfile FROM it, [environment] docker_image = image_name
    (a name no registry has: docker builds the Dockerfile and tags it so), tests/Dockerfile FROM that image.
    Without, for the host: the repository is environment/workspace, seeded into the workdir.
    `hook`: "deepswe" (the real command), None (no hook), or a command of its own."""
    task = root / task_id
    for sub in ("environment", "tests", "solution"):
        (task / sub).mkdir(parents=True)
    base = base_repository(task / "environment" / "workspace")
    command = hook_command(base) if hook == "deepswe" else hook
    collect = f"[[verifier.collect]]\ncommand = {json.dumps(command)}\ntimeout_sec = {hook_timeout}\n\n" if command else ""
    image = f'docker_image = "{image_name}"\n' if base_image and image_name else ""
    (task / "task.toml").write_text(
        'schema_version = "1.3"\nartifacts = ["/logs/artifacts/model.patch"]\n'
        f'[task]\nname = "test/{task_id}"\n[metadata]\nbase_commit_hash = "{base}"\nlanguage = "python"\n'
        '[verifier]\nnetwork_mode = "no-network"\nenvironment_mode = "separate"\ntimeout_sec = 120.0\n\n'
        "[verifier.env]\n[verifier.environment]\nbuild_timeout_sec = 600.0\ncpus = 1\nmemory_mb = 1024\n\n"
        f"{collect}"
        '[agent]\nnetwork_mode = "no-network"\ntimeout_sec = 120.0\n'
        f'[environment]\nbuild_timeout_sec = 600.0\n{image}workdir = "/app"\ncpus = 1\nmemory_mb = 1024\n')
    (task / "instruction.md").write_text("Fix add() in calc.py and commit your change.\n")
    (task / "solution" / "solve.sh").write_text(SOLVE)
    (task / "tests" / "test.sh").write_text(TEST)
    (task / "tests" / "test_calc.py").write_text(TEST_CALC)
    if base_image:
        (task / "environment" / "Dockerfile").write_text(
            f"FROM {base_image}\nWORKDIR /app\nCOPY workspace/ /app/\nRUN git config --global --add safe.directory /app\n")
        (task / "tests" / "Dockerfile").write_text(
            f"FROM {image_name}\nCOPY test.sh /tests/test.sh\nCOPY test_calc.py /tests/test_calc.py\n")
    return task
