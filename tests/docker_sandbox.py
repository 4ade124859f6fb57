"""What the docker provider's test modules share: sandboxes opened on the real engine from a plain build context,
Harbor task and recipe writers, and container lookups by label."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest

from agentcompass.core.sandbox import SandboxSpec


REPO = Path(__file__).resolve().parent.parent
# The sandbox tests' run label, one per worker process: a module's teardown removes its run's network (as a run's
# end does), which must not pull it from under another worker's module still opening sandboxes on it.
RUN_LABEL = f"pytest-docker-{os.getpid()}"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def containers(label: str) -> list[str]:
    out = subprocess.run(["docker", "ps", "-aq", "--filter", f"label={label}"], capture_output=True, text=True, check=True)
    return out.stdout.split()


def inspect(name: str) -> dict:
    out = subprocess.run(["docker", "inspect", name], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)[0]


def write_task(root: Path, task_id: str, dockerfile: str, solve: str = "true",
               test: str = "echo 1 > /logs/verifier/reward.txt") -> None:
    """A Harbor task dir with its own Dockerfile."""
    task = root / task_id
    for sub in ("environment", "solution", "tests"):
        (task / sub).mkdir(parents=True)
    (task / "task.toml").write_text('version = "1.0"\n[environment]\nworkdir = "/app"\n')
    (task / "instruction.md").write_text("Do it.\n")
    (task / "environment" / "Dockerfile").write_text(dockerfile)
    (task / "solution" / "solve.sh").write_text(solve + "\n")
    (task / "tests" / "test.sh").write_text("mkdir -p /logs/verifier\n" + test + "\n")


def write_recipe(config_dir: Path, name: str, dataset: Path) -> None:
    (config_dir / "recipes").mkdir(parents=True, exist_ok=True)
    (config_dir / "recipes" / f"{name}.yaml").write_text(
        f"name: {name}\ndescription: test tasks\nformat: harbor\nsource: {{path: {dataset}}}\n")


@pytest.fixture(scope="module")
def provider(base_image):
    from agentcompass.providers.docker.provider import DockerProvider

    made = DockerProvider()
    yield made
    made.end_run(RUN_LABEL)  # the run's network, as a run removes it when it ends


@pytest.fixture(scope="module")
def plain_context(tmp_path_factory, base_image) -> Path:
    """A build context FROM the base image, shared by the sandbox tests (built once, cached by hash)."""
    context = tmp_path_factory.mktemp("plain") / "environment"
    context.mkdir()
    (context / "Dockerfile").write_text(f"FROM {base_image}\nWORKDIR /app\n")
    return context


@pytest.fixture
def open_sandbox(provider, plain_context, tmp_path):
    """Opens sandboxes from specs (defaults: the plain image) and closes them all afterwards."""
    opened = []

    def opener(target=None, **fields):
        fields.setdefault("build_context", plain_context)
        spec = SandboxSpec(name=unique("ac-test"), labels={"agentcompass": "1", "run": RUN_LABEL},
                           log_dir=tmp_path, **fields)
        box = (target or provider).open(spec)
        opened.append(box)
        return box

    yield opener
    for box in opened:
        box.close()
