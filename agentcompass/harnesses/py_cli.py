"""What the installed Python CLIs (aider, kimi_cli, mistral_vibe, ...) share beyond the installed CLIs' base: their
bundle is a relocatable CPython with the pinned package installed (harnesses/py_bundle.py), not an npm binary.

The CPython minor version is the class's `python` (what the package's Requires-Python allows), made from this
machine's own; a machine without one refuses the run before anything is downloaded (one line, exit 2)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentcompass.core.errors import InfraError
from agentcompass.harnesses.cli_bundle import BUNDLE, INSTALL_TIMEOUT_S
from agentcompass.harnesses.installed import AGENT_DIR, HOME_DIR, InstalledAgent
from agentcompass.harnesses.py_bundle import find_python, py_bundle

if TYPE_CHECKING:
    from agentcompass.core.sandbox import Sandbox


class PythonCliAgent(InstalledAgent):
    """Subclasses name the PyPI package, its console script (`command_name`) and the CPython it runs on."""

    binary = ""  # no npm binary: the console script of the bundle
    python: str  # "3.12"

    class Settings(InstalledAgent.Settings):
        python_path: str | None = None  # this machine's CPython of the class's version; default: PATH or pyenv

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        # Cheap and before any download: a host that cannot make the bundle refuses the run in one line.
        self.host_python = find_python(self.python, self.settings.python_path)

    def prepare(self) -> None:
        cache = Path(self.settings.cache_dir).expanduser() if self.settings.cache_dir else None
        self.archive = py_bundle((f"{self.package}=={self.settings.version}",), self.host_python, cache)

    def install(self, sandbox: "Sandbox", timeout_s: float = INSTALL_TIMEOUT_S) -> None:
        if self.archive is None:
            self.prepare()
        assert self.archive is not None
        unpack(sandbox, self.archive, f"HOME={HOME_DIR} {AGENT_DIR}/bin/{self.command_name} --version",
               f"{self.package}=={self.settings.version}", timeout_s)


def unpack(sandbox: "Sandbox", archive: Path, check: str, what: str, timeout_s: float) -> None:
    """Upload a Python bundle, unpack it under AGENT_DIR and run `check` with it (the interpreter really starts)."""
    sandbox.upload(archive, f"{AGENT_DIR}/{BUNDLE}")
    done = sandbox.exec(f"mkdir -p {HOME_DIR} && tar -xzf {AGENT_DIR}/{BUNDLE} -C {AGENT_DIR} && rm {AGENT_DIR}/{BUNDLE} "
                        f"&& {check}", timeout=timeout_s)
    if not done.ok:
        raise InfraError(f"installing {what} in the sandbox failed (exit {done.exit_code}): "
                         f"{(done.stdout + done.stderr).strip()[-300:]}")
