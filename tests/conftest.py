"""Shared fixtures: the CLI as a user runs it, and the Docker engine with the local base image."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conformance_tally import TALLY, WORKER_KEY, summarize
from shared_cache import exclusive

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
# A suite started as a background job of a non-interactive shell inherits SIGINT ignored, and so would every
# CLI it starts (Python then installs no KeyboardInterrupt handler): the Ctrl-C tests need it caught again. A
# caught signal is reset to the default in the programs a test executes; an ignored one would stay ignored.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    except ValueError:  # not the main thread: nothing to restore from here
        pass


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-modal", action="store_true", help="run live Modal tests (needs Modal credentials)")
    parser.addoption("--run-gcp", action="store_true", help="run live GCP tests (needs GCP credentials)")
    parser.addoption("--run-conformance", action="store_true",
                     help="run the conformance suite against the official tools (tests/conformance; CI runs it)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist the slowest modules go first (tests/module_seconds.json, from a measured run; a module not
    in it counts as slow), so no minute-long module starts last and leaves the other workers idle at the end.
    A serial run keeps the collection order."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    seconds = json.loads((Path(__file__).parent / "module_seconds.json").read_text())
    unknown = max(seconds.values(), default=0.0) + 1

    def cost(item: pytest.Item) -> float:
        module = Path(str(item.fspath)).resolve().relative_to(REPO).as_posix()
        return seconds.get(module, unknown)
    items.sort(key=lambda item: -cost(item))  # stable: a module's tests keep their order


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A pytest-xdist worker hands its conformance tally to the controller."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput[WORKER_KEY] = TALLY.rows()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    TALLY.merge(getattr(node, "workeroutput", {}).get(WORKER_KEY, []))


def pytest_terminal_summary(terminalreporter) -> None:
    summarize(terminalreporter)


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
    with exclusive("base-image"):  # parallel test workers wait for one build
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
