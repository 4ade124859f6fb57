"""Side venvs: an official tool installed at its pinned version in a venv of its own, as its users install it.

The conformance tests drive swebench 4.1.0 and 5.0.2, terminal-bench, Harbor and mini-swe-agent themselves,
each beside agentcompass rather than inside its environment (their pins clash with ours and with each other,
and Harbor and terminal-bench need Python >= 3.12). A venv is made once per (name, python, packages) and
kept between runs of the suite under AGENTCOMPASS_SIDE_VENVS (default ~/.cache/agentcompass/side-venvs);
a lock makes parallel test workers wait for one build instead of racing it.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

PYENV_VERSIONS = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"


def interpreter(version: str) -> Path | None:
    """A Python of `version` ("3.12"): pyenv's newest patch release, else `python3.12` on PATH."""
    found = sorted(PYENV_VERSIONS.glob(f"{version}.*/bin/python{version}"),
                   key=lambda p: [int(x) for x in p.parent.parent.name.split(".") if x.isdigit()])
    if found:
        return found[-1]
    on_path = shutil.which(f"python{version}")
    return Path(on_path) if on_path else None


def side_venv(name: str, python_version: str, packages: list[str]) -> Path:
    """The python of a venv holding `packages` (pip requirement strings), built on first use.

    Raises RuntimeError with pip's last lines when the install fails, and FileNotFoundError when no
    interpreter of `python_version` is on this machine."""
    base = interpreter(python_version)
    if base is None:
        raise FileNotFoundError(f"no Python {python_version} here (pyenv's versions or python{python_version} on PATH)")
    key = hashlib.sha256("\n".join([str(base), *packages]).encode()).hexdigest()[:12]
    root = Path(os.environ.get("AGENTCOMPASS_SIDE_VENVS", Path.home() / ".cache" / "agentcompass" / "side-venvs"))
    venv = root / f"{name}-{key}"
    python = venv / "bin" / "python"
    done = venv / ".complete"
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{name}-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            return python
        shutil.rmtree(venv, ignore_errors=True)  # a build cut short earlier
        subprocess.run([str(base), "-m", "venv", str(venv)], check=True, capture_output=True)
        installed = subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *packages],
                                   capture_output=True, text=True)
        if installed.returncode != 0:
            raise RuntimeError(f"side venv {name}: pip install {' '.join(packages)} failed:\n{installed.stderr[-2000:]}")
        done.write_text("\n".join(packages) + "\n")
    return python
