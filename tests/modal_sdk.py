"""What the modal tests share: the fake SDK (tests/fake_modal.py) answering `import modal` with no credentials
from the environment or ~/.modal.toml, a provider and a sandbox spec aimed at it, `modal_cli` (the agentcompass
CLI in a subprocess with the fake installed), and `live`, the gate of the opt-in tests on real Modal. Test
modules import the fixtures by name and mark themselves `needs_bwrap`: the fake runs sandboxes under bubblewrap."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

import fake_modal
from agentcompass.core.sandbox import SandboxSpec

TESTS = Path(__file__).resolve().parent
SECRET = "as-" + "s3cr3t" * 4  # a token secret that must never reach a results file

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="the fake Modal SDK runs sandboxes with bubblewrap")


@pytest.fixture(scope="module")
def real_modal():
    return pytest.importorskip("modal", reason="the modal SDK (pip install '.[modal]' from the checkout) defines the signatures")


@pytest.fixture
def fake(monkeypatch, real_modal, tmp_path):
    """The fake SDK as `modal`, no credentials from the environment or ~/.modal.toml."""
    fake_modal.reset()
    for var in ("MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET", "MODAL_PROFILE", "MODAL_SERVER_URL", "MODAL_ENVIRONMENT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("MODAL_CONFIG_PATH", str(tmp_path / "no-modal.toml"))
    # `import modal` runs the shim, which reads the config as the SDK does at import, then answers with the fake.
    monkeypatch.delitem(sys.modules, "modal")
    monkeypatch.syspath_prepend(str(fake_modal.shim_dir(tmp_path / "shim")))
    yield fake_modal
    for sandbox in list(fake_modal.Sandbox.running.values()):
        sandbox.terminate()


def provider(**settings):
    from agentcompass.providers.modal.provider import ModalProvider

    return ModalProvider(**{"token_id": "ak-test", "token_secret": SECRET, **settings})


def spec(name="t1", **kw) -> SandboxSpec:
    kw.setdefault("image", "python:3.11-slim")
    return SandboxSpec(name=name, workdir="/app", labels={"agentcompass": "1", "run": "r", "trial": f"{name}.1"}, **kw)


def calls(name: str) -> list[tuple]:
    return [c for c in fake_modal.calls if c[0] == name]


@pytest.fixture
def sandbox(fake):
    box = provider().open(spec())
    yield box
    box.close()


@pytest.fixture
def modal_cli(cli, real_modal, tmp_path):
    """`agentcompass ...` with `import modal` answered by the fake; returns (run, sdk calls)."""
    shim = fake_modal.shim_dir(tmp_path / "shim")
    log = tmp_path / "sdk-calls.jsonl"
    path = os.pathsep.join([str(shim), str(TESTS), os.environ.get("PYTHONPATH", "")])
    base = {"PYTHONPATH": path, fake_modal.LOG_ENV: str(log), "MODAL_CONFIG_PATH": str(tmp_path / "none.toml"),
            "MODAL_TOKEN_ID": "", "MODAL_TOKEN_SECRET": "", "HOME": str(tmp_path)}

    def run(*args: str, env: dict[str, str] | None = None):
        result = cli(*args, env={**base, **(env or {})})
        sdk = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        return result, sdk

    run.env = base
    return run


def private_config(tmp_path: Path) -> Path:
    path = tmp_path / "private.yaml"
    path.write_text("environments:\n  modal:\n    token_id: ak-private\n    token_secret: ${oc.env:MY_MODAL_SECRET}\n")
    return path


@pytest.fixture
def live(request, real_modal):
    from agentcompass.providers.modal.provider import modal_credentials

    if not request.config.getoption("--run-modal"):
        pytest.skip("live Modal test: opt in with --run-modal")
    if modal_credentials(None, None) is None:
        pytest.skip("live Modal test: no credentials (MODAL_TOKEN_ID/MODAL_TOKEN_SECRET or ~/.modal.toml)")
