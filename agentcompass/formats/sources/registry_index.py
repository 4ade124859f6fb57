"""Harbor's registry, read: the git `registry.json` (a list of datasets, each `{name, version, description,
tasks: [{name, git_url, git_commit_id, path}]}`, one entry per (name, version)) from a URL or a local path,
or Harbor's Hub API (sources/registry_hub.py) for a location written `hub+https://...`.

Where the registry lives: `registries.harbor.url` in a `--config` file, else AGENTCOMPASS_HARBOR_REGISTRY,
else Harbor's git registry.json. Each answer is cached; when the registry cannot be reached, one line says
so and the cached copy is used. A dataset without a version resolves as Harbor's client resolves it.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentcompass.core.errors import UserError
from agentcompass.core.paths import cache_root
from agentcompass.core.registry import closest

REGISTRY_ENV = "AGENTCOMPASS_HARBOR_REGISTRY"
HARBOR_REGISTRY_URL = "https://raw.githubusercontent.com/laude-institute/harbor/main/registry.json"
FETCH_TIMEOUT_S = 30.0
KNOWN_REGISTRIES = ("harbor",)
HUB_PREFIX = "hub+"  # hub+https://PROJECT.supabase.co: Harbor's Hub API, not a registry.json

# Set from `registries.harbor.url` of a --config file by the command line (private: never recorded).
configured_location: str | None = None


def registry_location() -> str:
    return configured_location or os.environ.get(REGISTRY_ENV) or HARBOR_REGISTRY_URL


def registry_cache_dir() -> Path:
    return cache_root() / "registries"


def location_key(*parts: str) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def is_hub(location: str) -> bool:
    return location.startswith(HUB_PREFIX)


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
    """A registry.json's datasets: fetched, cached on success, the cached copy when it cannot be reached."""
    location = location or registry_location()
    return parse_registry(read_cached(location, "registry", lambda: read_location(location)), location)


def read_cached(location: str, what: str, fetch: Callable[[], str]) -> str:
    """`fetch()`'s answer, kept in the cache; the kept answer, said in one line, when the registry cannot be reached."""
    cached = registry_cache_dir() / f"harbor-{location_key(location, what)}.json"
    try:
        text = fetch()
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or type(exc).__name__
        if not cached.is_file():
            raise UserError(f"the harbor registry {redact(location)} cannot be reached ({reason}) and there is no "
                            f"cached copy; check the network, or set registries.harbor.url in --config or "
                            f"{REGISTRY_ENV} to a reachable URL or a local registry.json") from None
        print(f"agentcompass: the harbor registry {redact(location)} cannot be reached ({reason}); "
              f"using the cached copy", file=sys.stderr, flush=True)
        return cached.read_text(encoding="utf-8")
    registry_cache_dir().mkdir(parents=True, exist_ok=True)
    write_atomic(cached, text)
    return text


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
    versions = by_name.get(name) or unknown_dataset(name, sorted(by_name))
    return versions[chosen_version(name, version, sorted(versions))]


def unknown_dataset(name: str, names: list[str]) -> Any:
    raise UserError(f"the harbor registry has no dataset '{name}'{closest(name, names)}; "
                    f"see `agentcompass list benchmarks --registry harbor`")


def chosen_version(name: str, version: str | None, versions: list[str]) -> str:
    """VERSION if the dataset has it, Harbor's choice when none is named; else one clear error."""
    chosen = str(version) if version not in (None, "") else resolve_version(versions)
    if chosen not in versions:
        raise UserError(f"the harbor dataset '{name}' has no version '{chosen}'; its versions: "
                        f"{', '.join(versions)}{closest(chosen, versions)}")
    return chosen


def write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)
