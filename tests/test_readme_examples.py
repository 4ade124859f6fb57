"""Every fenced example of the README runs as written, unless the line before it marks it otherwise:

  <!-- example: skip (REASON) -->   needs credentials, the network or is the test suite itself: not run
  <!-- example: install -->         `pip install . && ...`: run in a fresh venv, pip kept offline
  <!-- example: docker (...) -->    needs a Docker engine (skips without one, fails in CI)

A YAML block whose first line is `# ~/PATH` is a file the reader writes: it is written under the test's
HOME before the bash blocks run. Commands run through bash in an empty directory with HOME there too."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import BASE_IMAGE, docker_available, make_venv, skip_or_fail

REPO = Path(__file__).resolve().parent.parent
MARKER = re.compile(r"<!-- example: (\w+)(?: \((.+)\))? -->")
KNOWN = {"skip", "install", "docker"}


@dataclass
class Example:
    lang: str
    text: str
    marker: str | None
    reason: str | None
    line: int


def readme_examples() -> list[Example]:
    lines = (REPO / "README.md").read_text().splitlines()
    examples, i = [], 0
    while i < len(lines):
        fence = re.match(r"^```(\w*)\s*$", lines[i])
        if not fence:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marked = MARKER.fullmatch(before.strip())
        examples.append(Example(fence.group(1), "\n".join(lines[i + 1:end]) + "\n",
                                marked.group(1) if marked else None, marked.group(2) if marked else None, i + 1))
        i = end + 1
    return examples


EXAMPLES = readme_examples()
BASH = [e for e in EXAMPLES if e.lang == "bash"]


def test_every_marker_is_known_and_every_skip_says_why():
    assert BASH, "the README has no bash examples"
    for example in BASH:
        assert example.marker in KNOWN | {None}, f"README line {example.line}: unknown marker {example.marker}"
        if example.marker == "skip":
            assert example.reason, f"README line {example.line}: a skipped example must say why"
    assert sum(e.marker is None for e in BASH) >= 1  # some examples must run


def shim_path(tmp: Path) -> str:
    """`agentcompass` on PATH running this checkout's code with this interpreter, as an install would."""
    bin_dir = tmp / "shim-bin"
    bin_dir.mkdir(exist_ok=True)
    shim = bin_dir / "agentcompass"
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} -m agentcompass \"$@\"\n")
    shim.chmod(0o755)
    return f"{bin_dir}:{os.environ['PATH']}"


def write_reader_files(home: Path) -> None:
    for example in EXAMPLES:
        first = example.text.splitlines()[0] if example.text.strip() else ""
        if example.lang == "yaml" and first.startswith("# ~/"):
            target = home / first[len("# ~/"):].split()[0]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(example.text)


def run_block(example: Example, cwd: Path, env: dict[str, str]) -> None:
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", example.text], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"README line {example.line}:\n{example.text}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


def user_env(home: Path, path: str) -> dict[str, str]:
    env = {**os.environ, "HOME": str(home), "PATH": path}
    env.pop("AGENTCOMPASS_DEBUG", None)
    return env


@pytest.mark.parametrize("example", [e for e in BASH if e.marker is None], ids=lambda e: f"line{e.line}")
def test_an_example_that_needs_nothing_runs_as_written(example, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    write_reader_files(home)
    run_block(example, tmp_path, user_env(home, shim_path(tmp_path)))


@pytest.mark.docker
@pytest.mark.parametrize("example", [e for e in BASH if e.marker == "docker"], ids=lambda e: f"line{e.line}")
def test_an_example_on_docker_runs_as_written(example, tmp_path):
    if (reason := docker_available()) is not None:
        skip_or_fail(reason)
    home = tmp_path / "home"
    home.mkdir()
    write_reader_files(home)
    # The reader's own Harbor tasks: the demo's, built on the local base image (no pull).
    for recipe in (home / "my-benchmarks" / "recipes").glob("*.yaml"):
        tasks = recipe.parent / recipe.stem
        if "source:" in recipe.read_text() and not tasks.exists():
            shutil.copytree(REPO / "recipes" / "demo", tasks)
            for dockerfile in tasks.glob("*/environment/Dockerfile"):
                dockerfile.write_text(re.sub(r"(?m)^FROM .*$", f"FROM {BASE_IMAGE}", dockerfile.read_text()))
    run_block(example, tmp_path, user_env(home, shim_path(tmp_path)))


@pytest.mark.parametrize("example", [e for e in BASH if e.marker == "install"], ids=lambda e: f"line{e.line}")
def test_the_install_example_installs_and_runs(example, tmp_path):
    """`pip install .` in a fresh venv from a copy of the checkout: the dependencies come from this environment
    and pip never reaches an index (hatchling is in the test extra, so no build-time download)."""
    checkout = tmp_path / "checkout"
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    for name in filter(None, files.split("\0")):
        if (REPO / name).is_file():
            (checkout / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, checkout / name)
    venv = tmp_path / "venv"
    make_venv(venv)
    home = tmp_path / "home"
    home.mkdir()
    env = user_env(home, f"{venv / 'bin'}:{os.environ['PATH']}")
    env.pop("PYTHONPATH", None)  # the installed code, not a checkout's
    env.update(PIP_NO_INDEX="1", PIP_NO_BUILD_ISOLATION="0", PIP_QUIET="1", VIRTUAL_ENV=str(venv))
    run_block(example, checkout, env)
    assert any((checkout / "results").glob("*/demo__oracle__none__local/summary.json"))
