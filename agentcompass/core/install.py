"""The pip line that installs an extra of THIS project. The name `agentcompass` on the public package
index is another project's (same import package and command, none of our extras), so a hint never
says `pip install agentcompass[...]`: it names this checkout when the code runs from one, else the
checkout to install from. Our distribution name (pyproject) is DISTRIBUTION, which does not collide."""

from __future__ import annotations

from pathlib import Path

DISTRIBUTION = "agentcompass-runner"


def checkout() -> Path | None:
    """The source tree this code runs from (an editable install or PYTHONPATH), if it is one."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").is_file() and (root / "agentcompass").is_dir() else None


def pip_install(extra: str) -> str:
    root = checkout()
    if root is not None:
        return f"pip install -e '{root}[{extra}]'"
    return f"pip install '.[{extra}]' in the agentcompass checkout ({DISTRIBUTION}; not 'agentcompass' from the index)"
