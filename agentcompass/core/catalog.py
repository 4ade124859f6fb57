"""The config folders and what they offer: names, files and descriptions, read without Hydra.

Only the standard library is imported here, so `--help` and `list` stay fast.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from agentcompass.core.errors import UserError
from agentcompass.core.paths import cache_root
from agentcompass.core.registry import closest

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # the agentcompass package

# config key -> (folder name in a config root, Hydra group@package, noun used in messages)
GROUPS: dict[str, tuple[str, str]] = {
    "benchmark": ("recipes", "recipes@benchmark"),
    "harness": ("harnesses", "harnesses@harness"),
    "model": ("models", "models@model"),
    "env": ("providers", "providers@env"),
}
PLURALS = {"benchmarks": "benchmark", "harnesses": "harness", "models": "model", "envs": "env"}
PLURAL_OF = {key: plural for plural, key in PLURALS.items()}


def shipped_root() -> Path:
    """The YAML folders: bundled inside the wheel, or the repository root in a checkout."""
    bundled = PACKAGE_DIR / "_config"
    return bundled if bundled.is_dir() else PACKAGE_DIR.parent


def search_roots(config_dirs: list[Path]) -> list[Path]:
    """Config roots, first match wins: later --config-dir first, then AGENTCOMPASS_CONFIG_PATH."""
    env_dirs = [Path(p) for p in os.environ.get("AGENTCOMPASS_CONFIG_PATH", "").split(os.pathsep) if p]
    for d in [*config_dirs, *env_dirs]:
        if not d.is_dir():
            raise UserError(f"config dir '{d}' does not exist; pass an existing directory with --config-dir or AGENTCOMPASS_CONFIG_PATH")
    root = shipped_root()
    return [*(d.resolve() for d in reversed(config_dirs)), *(d.resolve() for d in env_dirs), root / "conf", root]


def group_entries(key: str, roots: list[Path]) -> dict[str, Path]:
    """Every option of a group, name -> file, the first root that has a name winning."""
    folder = GROUPS[key][0]
    found: dict[str, Path] = {}
    for root in roots:
        for path in sorted((root / folder).glob("*.yaml")):
            found.setdefault(path.stem, path)
    return found


def describe(path: Path, roots: list[Path] | None = None) -> str:
    """The `description:` line of a YAML file, read without a YAML parser (fast `list`). A recipe without
    one that extends another (`defaults: [parent, _self_]`) has what it inherits: the last in merge order."""
    text = path.read_text(encoding="utf-8", errors="replace")
    for line in text.splitlines():
        if line.startswith("description:"):
            return line.partition(":")[2].strip().strip("'\"")
    if roots is not None and path.parent.name == GROUPS["benchmark"][0] and "defaults" in text:
        inherited = [data["description"] for _, data in recipe_chain(path.stem, roots)
                     if isinstance(data.get("description"), str)]
        return inherited[-1] if inherited else ""
    return ""


def recipe_marks(name: str, path: Path, roots: list[Path]) -> str:
    """Where a recipe comes from and what it needs, for `list benchmarks`: shipped or yours, its tasks from a
    registry (named) or its own source, and the envs that can run them (local only for host-only tasks)."""
    chain = [data for _, data in recipe_chain(name, roots)]
    origin = "shipped" if path.resolve().is_relative_to(shipped_root().resolve()) else f"yours ({path.parent.parent})"
    source = next((d["source"] for d in reversed(chain) if isinstance(d.get("source"), dict) and d["source"]), {})
    registry = (f"from the {source['registry']} registry" if source.get("registry") else "")
    on_host = any(d.get("runs_on_host") is True for d in chain)
    envs = "local, docker, modal, gcp" if on_host else "docker, modal, gcp"
    return f"[{'; '.join(part for part in (origin, registry, envs) if part)}]"


def check_choice(key: str, name: str, roots: list[Path]) -> None:
    options = group_entries(key, roots)
    if name not in options:
        choices = sorted(options)
        raise UserError(
            f"unknown {key} '{name}'; available {PLURAL_OF[key]}: {', '.join(choices)}{closest(name, choices)}; "
            f"see `agentcompass list {PLURAL_OF[key]}`"
        )


def known_envs() -> list[str]:
    """The envs `--help` offers: the shipped providers plus AGENTCOMPASS_CONFIG_PATH's (never one that has no YAML)."""
    try:
        roots = search_roots([])
    except UserError:
        roots = [shipped_root()]
    names = sorted(group_entries("env", roots))
    return ["local", *(n for n in names if n != "local")] if "local" in names else names


def recipe_chain(name: str, roots: list[Path], seen: frozenset[str] = frozenset()) -> list[tuple[Path, dict[str, Any]]]:
    """A recipe's YAML files in Hydra's merge order (its defaults list, `_self_` last unless placed),
    each with its plain data: what each file says, without composing."""
    import yaml

    path = group_entries("benchmark", roots).get(name)
    if path is None or name in seen:
        return []
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return []
    if not isinstance(data, dict):
        return []
    defaults = [d for d in data.get("defaults") or [] if isinstance(d, str)]
    if "_self_" not in defaults:
        defaults.append("_self_")
    chain: list[tuple[Path, dict[str, Any]]] = []
    for entry in defaults:
        chain += [(path, data)] if entry == "_self_" else recipe_chain(entry, roots, seen | {name})
    return chain


def recipe_format(name: str, roots: list[Path]) -> str | None:
    """A recipe's `format:`, the last file of its chain that sets one winning."""
    formats = [data["format"] for _, data in recipe_chain(name, roots) if isinstance(data.get("format"), str)]
    return str(formats[-1]) if formats else None


# -- registry datasets named on the command line ----------------------------------------------------
REGISTRY_PREFIXES = ("harbor",)  # `harbor:NAME[@VERSION]` names a dataset of Harbor's registry


def registry_reference(benchmark: str) -> tuple[str, str, str | None] | None:
    """(registry, dataset, version or None) for `harbor:NAME[@VERSION]`, else None (a recipe name)."""
    registry, colon, rest = benchmark.partition(":")
    if not colon or registry not in REGISTRY_PREFIXES:
        return None
    name, at, version = rest.partition("@")
    if not name or (at and not version):
        raise UserError(f"benchmark '{benchmark}': a registry dataset is named {registry}:NAME or {registry}:NAME@VERSION; "
                        f"see `agentcompass list benchmarks --registry {registry}`")
    return registry, name, version or None


def registry_recipe(benchmark: str) -> tuple[Path, str] | None:
    """For `harbor:NAME[@VERSION]`: a config root holding a generated recipe over that dataset, and the recipe's
    name; None for a recipe name. The recipe only names the dataset: resolving it (network, pins) is the
    format's, when the tasks load. Harbor tasks build their own images, so the recipe is Harbor's format
    with Harbor's scoring rule; extend it (defaults list) to set timeouts, resources or a subset."""
    import json

    reference = registry_reference(benchmark)
    if reference is None:
        return None
    registry, name, version = reference
    the_default = "(its default version)"
    recipe_name = "_".join(re.sub(r"[^A-Za-z0-9_-]+", "-", part) for part in (registry, name, version or "default"))
    root = cache_root() / "registry-recipes"
    text = "\n".join([
        f"name: {recipe_name}",
        f"description: {json.dumps(f'{registry} registry dataset {name}@{version or the_default}')}",
        "format: harbor",
        "scoring: valid_reward",
        f"source: {json.dumps({'registry': registry, 'dataset': name, 'version': version})}",
        "build_args:",
        "  BASE_IMAGE: ${oc.env:AGENTCOMPASS_BASE_IMAGE,python:3.11-slim-bookworm}",
        "params: {sample_ids: null, limit: null}",
        "",
    ])
    path = root / GROUPS["benchmark"][0] / f"{recipe_name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")
    return root, recipe_name
