"""The conformance suite: the official tools, each in a venv of its own at its pinned version, fed the
inputs agentcompass gets, and their answers compared with ours.

Opt in with `--run-conformance` (scripts/test.sh and CI pass it). Every test tallies its comparisons
per anchor ("swebench 4.1.0: 212 of 212 verdicts identical"), printed at the end of the run; with
AGENTCOMPASS_CONFORMANCE_TABLE=FILE the table is also written there (benchmarks/conformance.sh).
A divergence fails its test unless docs/deliberate-differences.md lists its id with a reason.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import IN_CI, REPO
from conformance_tally import TALLY, Tally
from sidevenv import ANCHORS, side_venv

HERE = Path(__file__).resolve().parent
DRIVERS = HERE / "drivers"
DIFFERENCES_DOC = REPO / "docs" / "deliberate-differences.md"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    run = config.getoption("--run-conformance") or IN_CI
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.conformance)
            if not run:
                item.add_marker(pytest.mark.skip(reason="conformance suite: opt in with --run-conformance"))


@pytest.fixture(scope="session")
def tally() -> Tally:
    return TALLY


def deliberate_differences() -> dict[str, str]:
    """id -> reason, from the `### id` headings of docs/deliberate-differences.md."""
    text = DIFFERENCES_DOC.read_text(encoding="utf-8")
    found = re.findall(r"^### `([\w./-]+)`\n+(.+?)(?=^### |\Z)", text, flags=re.M | re.S)
    return {key: reason.strip() for key, reason in found}


@pytest.fixture(scope="session")
def allowed() -> dict[str, str]:
    return deliberate_differences()


def anchor_python(anchor: str) -> Path:
    name, python, packages = ANCHORS[anchor]
    try:
        return side_venv(name, python, packages)
    except (FileNotFoundError, RuntimeError) as exc:
        if IN_CI:
            pytest.fail(f"CI must run the conformance suite, but {anchor} cannot be installed: {exc}")
        pytest.skip(f"{anchor} cannot be installed here: {exc}")


@pytest.fixture(scope="session")
def compose_v2_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Environment under which `docker compose` is compose v2 (the official harnesses' only way to start
    a task): a DOCKER_CONFIG whose cli-plugins/ holds the pinned binary, nothing installed system-wide."""
    python = anchor_python("docker compose 2.40.3")
    binary = Path(subprocess.run([str(python), "-c", "import compose, pathlib; print(pathlib.Path(compose.__file__).parent)"],
                                 capture_output=True, text=True, check=True).stdout.strip()) / "docker-compose"
    config = tmp_path_factory.mktemp("docker-config")
    (config / "cli-plugins").mkdir()
    (config / "cli-plugins" / "docker-compose").symlink_to(binary)
    env = {"DOCKER_CONFIG": str(config)}
    version = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True, env={**os.environ, **env})
    assert version.returncode == 0 and "v2." in version.stdout, f"docker compose v2 plugin: {version.stderr}"
    return env


def run_driver(python: Path, driver: str, request: dict[str, Any], timeout: float = 600,
               cwd: Path | None = None, env: dict[str, str] | None = None) -> Any:
    """A driver script of drivers/ under the anchor's own python; its JSON answer."""
    done = subprocess.run([str(python), str(DRIVERS / driver)], input=json.dumps(request), capture_output=True,
                          text=True, timeout=timeout, cwd=cwd, env={**os.environ, **(env or {}), "PYTHONPATH": ""})
    assert done.returncode == 0, f"{driver} under {python} failed:\n{done.stderr[-3000:]}"
    return json.loads(done.stdout)


def check_divergences(found: dict[str, list[str]], allowed: dict[str, str]) -> None:
    """Fail on any divergence id not documented as deliberate (with up to three of its cases)."""
    unexplained = {key: cases for key, cases in found.items() if cases and key not in allowed}
    assert not unexplained, "divergences from the official tool:\n" + "\n".join(
        f"  {key}: {len(cases)} cases, e.g. {'; '.join(cases[:3])}" for key, cases in unexplained.items())
