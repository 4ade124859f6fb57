"""Where a composed config value came from: the flag or file the user typed, or the shipped YAML.

Messages about a bad value name that source (`--env-params`, `--config ~/p.yaml`, the
override `run.k=abc`, or the recipe file), and a relative path is read from there: against
the current directory when typed on the command line, against the file's directory when
written in a YAML file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Source:
    label: str  # what to print after "from": a flag, an override as typed, or a file
    base_dir: Path  # what a relative path in this value is relative to


@dataclass
class Provenance:
    typed: list[tuple[str, str]] = field(default_factory=list)  # (dotted key an override sets, what the user typed)
    overlays: list[tuple[Path, dict[str, Any]]] = field(default_factory=list)  # each --config file, as plain data
    files: dict[str, Path | None] = field(default_factory=dict)  # config group -> the YAML file selected
    env_name: str = ""
    recipe_files: list[tuple[Path, dict[str, Any]]] = field(default_factory=list)  # the recipe and its parents, merge order

    def of(self, where: str) -> Source | None:
        """The source of the value at dotted `where` (e.g. `env.isolation`); None when unknown."""
        aliases = [where]
        group, _, rest = where.partition(".")
        if group == "env" and rest:  # environments.<env> merges into env
            aliases.append(f"environments.{self.env_name}.{rest}")
        for path, data in reversed(self.overlays):  # --config files have the last word
            if any(holds(data, alias) for alias in aliases):
                return Source(f"--config {path}", path.parent)
        for key, label in reversed(self.typed):
            if any(alias == key or alias.startswith(key + ".") for alias in aliases):
                return Source(label, Path.cwd())
        if group == "benchmark":  # the recipe file (or parent recipe) that says it; a per-env override first
            for wanted in (f"overrides.{self.env_name}.{rest}", rest):
                for path, data in reversed(self.recipe_files):
                    if holds(data, wanted):
                        return Source(str(path), path.parent)
        file = self.files.get(group)
        return Source(str(file), file.parent) if file is not None else None

    def describe(self, where: str) -> str:
        """' (from SOURCE)' for messages, or ''."""
        source = self.of(where)
        return f" (from {source.label})" if source else ""


def holds(data: Any, dotted: str) -> bool:
    for part in dotted.split("."):
        if not isinstance(data, dict) or part not in data:
            return False
        data = data[part]
    return True
