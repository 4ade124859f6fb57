"""Where the runs are: every directory with a run.json under the roots the user named.

A root may be a results dir, one run name (a sweep) or one run dir. Each run gets a short id, its
path relative to its root prefixed by the root's number, so URLs never carry a host path and a
path can be checked to stay inside its root before anything is read."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentcompass.core.runlock import holder_of
from agentcompass.core.safe_files import contained

MAX_DEPTH = 3  # results/<run_name>/<combination>/run.json


@dataclass(frozen=True)
class RunRef:
    id: str  # "<root number>/<path under the root>"
    path: Path
    sweep: str  # the run name (the directory above the combination), or "" for a lone run dir


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from a file in its folder; {} when it is missing, unreadable, or a link out of that folder."""
    real = contained(path.parent, path)
    if real is None:
        return {}
    try:
        value = json.loads(real.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


class Catalog:
    def __init__(self, roots: list[Path]):
        self.roots = [r.resolve() for r in roots]

    def runs(self) -> list[RunRef]:
        found = []
        for number, root in enumerate(self.roots):
            for run_json in sorted(self.run_files(root)):
                run_dir = run_json.parent
                if not run_dir.resolve().is_relative_to(root):  # a linked folder leading out of the root
                    continue
                rel = run_dir.relative_to(root).as_posix()
                sweep = run_dir.parent.name if run_dir != root and run_dir.parent != root.parent else ""
                found.append(RunRef(f"{number}/{rel}" if rel != "." else f"{number}", run_dir, sweep))
        return found

    @staticmethod
    def run_files(root: Path) -> list[Path]:
        if (root / "run.json").is_file():
            return [root / "run.json"]
        out: list[Path] = []
        level = [root]
        for _ in range(MAX_DEPTH):
            level = [d for parent in level for d in sorted(parent.iterdir())
                     if d.is_dir() and not d.name.startswith(".") and d.resolve().is_relative_to(root)] \
                if level else []
            out += [d / "run.json" for d in level if (d / "run.json").is_file()]
            level = [d for d in level if not (d / "run.json").is_file() and d.name != "tasks"]
        return out

    def resolve(self, run_id: str) -> RunRef | None:
        """The run of an id from a URL, or None: an unknown root, a path leaving its root, no run.json."""
        number, _, rel = run_id.partition("/")
        if not number.isdigit() or int(number) >= len(self.roots):
            return None
        root = self.roots[int(number)]
        path = (root / rel).resolve()
        if not path.is_relative_to(root) or not (path / "run.json").is_file():
            return None
        return RunRef(run_id, path, path.parent.name if path != root else "")

    def attempt_dir(self, run: RunRef, task_id: str, attempt: int) -> Path | None:
        path = (run.path / "tasks" / task_id / f"attempt-{attempt}").resolve()
        return path if path.is_relative_to(run.path) and path.is_dir() else None


def run_status(run_dir: Path, info: dict[str, Any]) -> str:
    """run.json's status, except that a "running" run whose lock nobody holds was killed."""
    status = str(info.get("status") or "unknown")
    if status == "running" and holder_of(run_dir) is None:
        return "killed"
    return status


def labels_of(info: dict[str, Any]) -> dict[str, Any]:
    config = info.get("config") or {}
    labels = dict(config.get("labels") or {})
    model = config.get("model") or {}
    labels.setdefault("model", model.get("name"))
    labels["reasoning"] = model.get("reasoning")
    return labels
