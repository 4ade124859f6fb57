"""Shared fixtures: the CLI as a user runs it, and the Docker engine with the local base image."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"
BASE_IMAGE = "agentcompass/base:bookworm"
IN_CI = os.environ.get("CI") == "true"
# The demo's Dockerfiles build FROM a public base by default; the tests build on the local offline one and
# never pull (the CLI subprocesses inherit this).
os.environ["AGENTCOMPASS_BASE_IMAGE"] = BASE_IMAGE
# A test that imports litellm itself (mini-swe-agent's runner, the SDK type checks) reads its bundled price map,
# as agentcompass does, instead of trying the network at import.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-modal", action="store_true", help="run live Modal tests (needs Modal credentials)")
    parser.addoption("--run-gcp", action="store_true", help="run live GCP tests (needs GCP credentials)")
    parser.addoption("--run-conformance", action="store_true",
                     help="run the conformance suite against the official tools (tests/conformance; CI runs it)")


def run_cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
            timeout: float = 300, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """`agentcompass ARGS` in a subprocess, exactly as a user types it (`stdin`: what they type at prompts)."""
    full_env = {**os.environ, **(env or {})}
    full_env.pop("AGENTCOMPASS_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "agentcompass", *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout, input=stdin)


@pytest.fixture
def cli():
    return run_cli


def docker_available() -> str | None:
    """None when a Docker engine answers, else the reason it does not."""
    if shutil.which("docker") is None:
        return "no docker CLI"
    probe = subprocess.run(["docker", "info"], capture_output=True, text=True)
    return None if probe.returncode == 0 else "no Docker engine answers `docker info`"


def skip_or_fail(reason: str) -> None:
    """Tests that need an engine skip on a developer machine without one; in CI they must run."""
    if IN_CI:
        pytest.fail(f"CI must run this test, but: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def docker_engine() -> None:
    reason = docker_available()
    if reason:
        skip_or_fail(reason)


@pytest.fixture(scope="session")
def base_image(docker_engine: None) -> str:
    """The Debian base image built from this machine's apt sources (cached by tag)."""
    have = subprocess.run(["docker", "image", "inspect", BASE_IMAGE], capture_output=True)
    if have.returncode != 0:
        built = subprocess.run(["bash", str(REPO / "scripts" / "build-base-image.sh")], capture_output=True, text=True)
        if built.returncode != 0:
            skip_or_fail(f"cannot build {BASE_IMAGE}: {built.stderr[-500:]}")
    return BASE_IMAGE


def make_venv(path: Path, with_pip: bool = True) -> Path:
    """A fresh venv that sees this test environment's packages (a venv or not) and returns its python.

    They are listed in a .pth file: `--system-site-packages` would show the base interpreter's
    packages, not an outer venv's; and paths a .pth lists are not scanned for .pth files, so an
    editable agentcompass installed there stays out."""
    subprocess.run([sys.executable, "-m", "venv", *([] if with_pip else ["--without-pip"]), str(path)],
                   check=True, capture_output=True)
    python = path / "bin" / "python"
    site_dir = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                              capture_output=True, text=True, check=True).stdout.strip()
    outer = [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    (Path(site_dir) / "outer-environment.pth").write_text("\n".join(outer) + "\n")
    return python
