"""Harbor's dataset registry: `source: {registry: harbor, dataset: NAME, version: VERSION}`.

A dataset's tasks come from the registry (sources/registry_index.py). A task without `git_commit_id`
follows its repository's HEAD in Harbor; here it is pinned once, to the commit HEAD names at the first
resolve, and that pin is kept in the cache, so a rerun gets the same tasks. Every resolved run records its
pins under `benchmark.source.pinned` in run.json; a recipe that carries such a block needs no registry.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, NoReturn

from agentcompass.core.errors import UserError
from agentcompass.core.paths import cache_root
from agentcompass.core.schema import Recipe
from agentcompass.formats.sources.git import built_once, remote_head, sparse_checkout
from agentcompass.formats.sources.registry_hub import hub_dataset, hub_list
from agentcompass.formats.sources.registry_index import (KNOWN_REGISTRIES, find_dataset, is_hub, load_registry,
                                                         location_key, redact, registry_cache_dir, registry_location,
                                                         write_atomic)

MIRROR_HINT = ("check the network; behind a firewall, point git at a mirror with `git config --global "
               "url.<mirror>.insteadOf <git_url>`")


def dataset_spec(location: str, name: str, version: str | None) -> dict[str, Any]:
    """One dataset version as a registry.json row, from the git registry or the Hub."""
    if is_hub(location):
        return hub_dataset(location, name, version)
    return find_dataset(load_registry(location), name, version)


def list_datasets(location: str | None = None) -> list[tuple[str, str, int, str]]:
    """(name, version, task count, description) of every dataset, by name then version."""
    location = location or registry_location()
    if is_hub(location):
        return sorted(hub_list(location))
    rows = load_registry(location)
    return sorted((r["name"], r["version"], len(r["tasks"]), str(r.get("description") or "")) for r in rows)


def pinned_tasks(location: str, spec: dict[str, Any]) -> list[dict[str, str]]:
    """The dataset's tasks, each at a commit: the registry's, or, for a task without one, the commit its
    repository's HEAD named at the first resolve (kept in the cache per dataset version, so a rerun gets it)."""
    heads_file = registry_cache_dir() / f"heads-{location_key(location, spec['name'], spec['version'])}.json"
    heads: dict[str, str] = json.loads(heads_file.read_text(encoding="utf-8")) if heads_file.is_file() else {}
    known = dict(heads)
    pins = []
    for task in spec["tasks"]:
        url, path = task.get("git_url"), task.get("path")
        if not isinstance(url, str) or not isinstance(path, str):
            raise UserError(f"harbor dataset {spec['name']}@{spec['version']}: task {task.get('name')!r} has no "
                            f"git_url and path; only git-hosted registry tasks are supported")
        commit = task.get("git_commit_id") or heads.get(url) or heads.setdefault(url, remote_head(url, MIRROR_HINT))
        pins.append({"name": str(task.get("name") or Path(path).name), "git_url": url,
                     "git_commit_id": str(commit), "path": path})
    if heads != known:
        registry_cache_dir().mkdir(parents=True, exist_ok=True)
        write_atomic(heads_file, json.dumps(heads, indent=1))
    return pins


def registry_root(recipe: Recipe) -> Path:
    """The dataset directory of a registry source: its tasks' folders side by side, as Harbor downloads them."""
    source = recipe.source
    which = source.get("registry")
    if which not in KNOWN_REGISTRIES:
        raise UserError(f"benchmark '{recipe.name}': unknown registry '{which}'; supported: "
                        f"{', '.join(KNOWN_REGISTRIES)}")
    name = source.get("dataset")
    if not isinstance(name, str) or not name:
        raise UserError(f"benchmark '{recipe.name}': source.registry needs source.dataset, a dataset name "
                        f"(see `agentcompass list benchmarks --registry harbor`)")
    recorded = source.get("pinned")
    if isinstance(recorded, dict) and isinstance(recorded.get("tasks"), list):
        pins, version = recorded["tasks"], recorded.get("version")  # a recorded run's tasks: no registry needed
    else:
        location = registry_location()
        spec = dataset_spec(location, name, source.get("version"))
        pins, version = pinned_tasks(location, spec), spec["version"]
    source["pinned"] = {"dataset": name, "version": version, "tasks": pins}  # recorded in run.json
    return assemble(pins)


def assemble(pins: list[dict[str, str]]) -> Path:
    """One folder holding each task's folder (named as Harbor names it: the path's last part), built once."""
    target = cache_root() / "datasets" / f"registry-{location_key(json.dumps(pins, sort_keys=True))}"
    if target.is_dir():
        return target
    for pin in pins:
        check_pin(pin)
    groups: dict[tuple[str, str], list[str]] = {}
    for pin in pins:
        groups.setdefault((pin["git_url"], pin["git_commit_id"]), []).append(pin["path"].strip("/"))
    checkouts = {key: sparse_checkout(key[0], key[1], paths, MIRROR_HINT) for key, paths in groups.items()}

    def copy_tasks(staging: Path) -> None:
        for pin in pins:
            checkout = checkouts[(pin["git_url"], pin["git_commit_id"])]
            folder = checkout / pin["path"].strip("/")
            name = Path(pin["path"].strip("/")).name
            if any((checkout / Path(*Path(pin["path"].strip("/")).parts[:n])).is_symlink()
                   for n in range(1, len(Path(pin["path"].strip("/")).parts) + 1)):
                raise UserError(f"harbor registry task {pin.get('name')!r}: its path '{pin['path']}' goes through a "
                                f"symbolic link; a task path must be a plain folder of its repository")
            if not folder.is_dir():
                raise UserError(f"harbor registry task {pin.get('name')!r}: '{pin['path']}' is no folder in "
                                f"{redact(pin['git_url'])} at {pin['git_commit_id']}; the registry entry is wrong")
            if (staging / name).exists():
                raise UserError(f"harbor registry: two tasks are both named '{name}'; cannot run them side by side")
            copy_task(folder, staging / name, str(pin.get("name") or name))

    return built_once(target, copy_tasks)


def check_pin(pin: Any) -> None:
    """A pinned task names a repository, a commit and a folder inside it (a recorded block may be hand-made)."""
    fields = ("git_url", "git_commit_id", "path")
    if not isinstance(pin, dict) or not all(isinstance(pin.get(k), str) and pin[k] for k in fields):
        raise UserError(f"a pinned registry task must have git_url, git_commit_id and path, got {pin!r}; "
                        f"copy benchmark.source.pinned from a run.json as it is")
    path = Path(pin["path"])
    if path.is_absolute() or ".." in path.parts:
        raise UserError(f"harbor registry task {pin.get('name')!r}: task path {pin['path']!r} leaves its repository; "
                        f"a task path is relative to the repository root")


def copy_task(source: Path, destination: Path, task: str) -> None:
    """The task folder, copied with each link replaced by what it points to, as Harbor materializes a git task.
    A link must be relative and stay inside the task: one that reaches out (an absolute target, `../..`) would
    carry a file of this machine into the sandbox the agent works in, so the dataset is refused."""
    root = source.resolve(strict=True)

    def refuse(relative: Path, why: str) -> NoReturn:
        raise UserError(f"harbor registry task {task!r}: {relative} {why}; a task's links must be relative and stay "
                        f"inside the task folder, so this dataset is refused")

    def copy(path: Path, target: Path, open_dirs: frozenset[Path]) -> None:
        relative = path.relative_to(root)
        if path.is_symlink() and os.path.isabs(os.readlink(path)):
            refuse(relative, "is an absolute link")
        try:
            real = path.resolve(strict=True)
        except (OSError, RuntimeError):
            refuse(relative, "is a broken or looping link")
        if not real.is_relative_to(root):
            refuse(relative, "links outside the task")
        if real.is_dir():
            if real in open_dirs:
                refuse(relative, "links to a folder that holds it")
            target.mkdir()
            for child in sorted(real.iterdir()):
                copy(child, target / child.name, open_dirs | {real})
            shutil.copystat(real, target)
        elif real.is_file():
            shutil.copy2(real, target)
        else:
            refuse(relative, "is neither a file nor a folder")

    copy(root, destination, frozenset())
