"""Harbor's dataset registry: `source: {registry: harbor, dataset: NAME, version: VERSION}`.

The registry is Harbor's git `registry.json`: a list of datasets, each `{name, version, description,
tasks: [{name, git_url, git_commit_id, path}]}`, one entry per (name, version). A dataset without a
version resolves the way Harbor's client does: `head` if listed, else the highest PEP 440 version, else
the lexically last. A task without `git_commit_id` follows its repository's HEAD in Harbor; here it is
pinned once, to the commit HEAD names at the first resolve, and that pin is kept in the cache, so a rerun
gets the same tasks. Every resolved run records its pins under `benchmark.source.pinned` in run.json.

Where the registry lives: `registries.harbor.url` in a `--config` file, else AGENTCOMPASS_HARBOR_REGISTRY,
else Harbor's own URL; a URL or a local registry.json path. Each answer is cached; when the registry
cannot be reached, one line says so and the cached copy is used.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from agentcompass.core.errors import UserError
from agentcompass.core.paths import cache_root
from agentcompass.core.registry import closest
from agentcompass.core.schema import Recipe
from agentcompass.formats.sources.git import built_once, remote_head, sparse_checkout

REGISTRY_ENV = "AGENTCOMPASS_HARBOR_REGISTRY"
HARBOR_REGISTRY_URL = "https://raw.githubusercontent.com/laude-institute/harbor/main/registry.json"
FETCH_TIMEOUT_S = 30.0
KNOWN_REGISTRIES = ("harbor",)
MIRROR_HINT = ("check the network; behind a firewall, point git at a mirror with `git config --global "
               "url.<mirror>.insteadOf <git_url>`")

# Set from `registries.harbor.url` of a --config file by the command line (it is private: never recorded).
configured_location: str | None = None


def registry_location() -> str:
    return configured_location or os.environ.get(REGISTRY_ENV) or HARBOR_REGISTRY_URL


def registry_cache_dir() -> Path:
    return cache_root() / "registries"


def location_key(*parts: str) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def is_url(location: str) -> bool:
    return "://" in location and not location.startswith("file://")


def local_path(location: str) -> Path:
    return Path(location.removeprefix("file://")).expanduser()


def read_location(location: str) -> str:
    """The registry's text; OSError (or ValueError) when it cannot be had."""
    if not is_url(location):
        return local_path(location).read_text(encoding="utf-8")
    import urllib.request  # here: only registry runs pay for http.client

    with urllib.request.urlopen(location, timeout=FETCH_TIMEOUT_S) as answer:
        return str(answer.read().decode("utf-8"))


def load_registry(location: str | None = None) -> list[dict[str, Any]]:
    """The registry's datasets: fetched, cached on success, the cached copy when it cannot be reached."""
    location = location or registry_location()
    cached = registry_cache_dir() / f"harbor-{location_key(location)}.json"
    try:
        text = read_location(location)
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or type(exc).__name__
        if not cached.is_file():
            raise UserError(f"the harbor registry {redact(location)} cannot be reached ({reason}) and there is no "
                            f"cached copy; check the network, or set registries.harbor.url in --config or "
                            f"{REGISTRY_ENV} to a reachable URL or a local registry.json") from None
        print(f"agentcompass: the harbor registry {redact(location)} cannot be reached ({reason}); "
              f"using the cached copy", file=sys.stderr, flush=True)
        text = cached.read_text(encoding="utf-8")
    else:
        registry_cache_dir().mkdir(parents=True, exist_ok=True)
        write_atomic(cached, text)
    return parse_registry(text, location)


def parse_registry(text: str, location: str) -> list[dict[str, Any]]:
    try:
        rows = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"the harbor registry {redact(location)} is not JSON ({exc.msg}, line {exc.lineno}); "
                        f"it must be a registry.json: a list of datasets") from None
    good = isinstance(rows, list) and all(
        isinstance(r, dict) and isinstance(r.get("name"), str) and isinstance(r.get("tasks"), list) for r in rows)
    if not good:
        raise UserError(f"the harbor registry {redact(location)} is no registry.json: expected a list of "
                        f"{{name, version, tasks: [{{name, git_url, git_commit_id, path}}]}}")
    return [{**r, "version": str(r.get("version") or "")} for r in rows]


def redact(location: str) -> str:
    """The location without a user:password part (a private mirror's URL may carry a token)."""
    scheme, sep, rest = location.partition("://")
    host, slash, path = rest.partition("/")
    return f"{scheme}{sep}{host.rpartition('@')[2]}{slash}{path}" if sep else location


def resolve_version(versions: list[str]) -> str:
    """Harbor's choice when no version is named: `head`, else the highest PEP 440 version, else the lexically last."""
    from packaging.version import InvalidVersion, Version

    if "head" in versions:
        return "head"
    parsed = []
    for v in versions:
        try:
            parsed.append((Version(v), v))
        except InvalidVersion:
            pass
    return max(parsed)[1] if parsed else sorted(versions)[-1]


def find_dataset(rows: list[dict[str, Any]], name: str, version: str | None) -> dict[str, Any]:
    by_name: dict[str, dict[str, dict[str, Any]]] = {}
    for row in rows:
        by_name.setdefault(row["name"], {})[row["version"]] = row
    if name not in by_name:
        raise UserError(f"the harbor registry has no dataset '{name}'{closest(name, sorted(by_name))}; "
                        f"see `agentcompass list benchmarks --registry harbor`")
    versions = by_name[name]
    chosen = str(version) if version not in (None, "") else resolve_version(sorted(versions))
    if chosen not in versions:
        raise UserError(f"the harbor dataset '{name}' has no version '{chosen}'; its versions: "
                        f"{', '.join(sorted(versions))}{closest(chosen, sorted(versions))}")
    return versions[chosen]


def pinned_tasks(location: str, spec: dict[str, Any]) -> list[dict[str, str]]:
    """The dataset's tasks, each at a commit: the registry's, or HEAD's at the first resolve (kept in the cache)."""
    pin_file = registry_cache_dir() / f"pins-{location_key(location, spec['name'], spec['version'])}.json"
    if pin_file.is_file():
        return list(json.loads(pin_file.read_text(encoding="utf-8")))
    heads: dict[str, str] = {}
    pins = []
    for task in spec["tasks"]:
        url, path = task.get("git_url"), task.get("path")
        if not isinstance(url, str) or not isinstance(path, str):
            raise UserError(f"harbor dataset {spec['name']}@{spec['version']}: task {task.get('name')!r} has no "
                            f"git_url and path; only git-hosted registry tasks are supported")
        if Path(path).is_absolute() or ".." in Path(path).parts:
            raise UserError(f"harbor dataset {spec['name']}@{spec['version']}: task path {path!r} leaves its "
                            f"repository; a task path is relative to the repository root")
        commit = task.get("git_commit_id") or heads.get(url) or heads.setdefault(url, remote_head(url, MIRROR_HINT))
        pins.append({"name": str(task.get("name") or Path(path).name), "git_url": url,
                     "git_commit_id": str(commit), "path": path})
    registry_cache_dir().mkdir(parents=True, exist_ok=True)
    write_atomic(pin_file, json.dumps(pins, indent=1))
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
        spec = find_dataset(load_registry(location), name, source.get("version"))
        pins, version = pinned_tasks(location, spec), spec["version"]
    source["pinned"] = {"dataset": name, "version": version, "tasks": pins}  # recorded in run.json
    return assemble(pins)


def assemble(pins: list[dict[str, str]]) -> Path:
    """One folder holding each task's folder (named as Harbor names it: the path's last part), built once."""
    target = cache_root() / "datasets" / f"registry-{location_key(json.dumps(pins, sort_keys=True))}"
    if target.is_dir():
        return target
    groups: dict[tuple[str, str], list[str]] = {}
    for pin in pins:
        groups.setdefault((pin["git_url"], pin["git_commit_id"]), []).append(pin["path"].strip("/"))
    checkouts = {key: sparse_checkout(key[0], key[1], paths, MIRROR_HINT) for key, paths in groups.items()}

    def copy_tasks(staging: Path) -> None:
        for pin in pins:
            folder = checkouts[(pin["git_url"], pin["git_commit_id"])] / pin["path"].strip("/")
            name = Path(pin["path"].strip("/")).name
            if not folder.is_dir():
                raise UserError(f"harbor registry task {pin['name']!r}: '{pin['path']}' is no folder in "
                                f"{redact(pin['git_url'])} at {pin['git_commit_id']}; the registry entry is wrong")
            if (staging / name).exists():
                raise UserError(f"harbor registry: two tasks are both named '{name}'; cannot run them side by side")
            shutil.copytree(folder, staging / name, symlinks=True)

    return built_once(target, copy_tasks)


def list_datasets(location: str | None = None) -> list[tuple[str, str, int, str]]:
    """(name, version, task count, description) of every dataset, by name then version."""
    rows = load_registry(location)
    return sorted((r["name"], r["version"], len(r["tasks"]), str(r.get("description") or "")) for r in rows)


def write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)
