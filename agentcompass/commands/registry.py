"""Registry datasets on the command line: `harbor:NAME[@VERSION]` as the BENCHMARK of run, config show and
list tasks, `list benchmarks --registry harbor`, and the registry's location from `registries.harbor.url`
in a --config file (private: read here, never merged into what run.json records)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentcompass.core.errors import UserError


def registry_benchmarks(invocation: Any, benchmark: str) -> str:
    """BENCHMARK with each `harbor:...` item replaced by the name of a generated recipe over it (its folder is
    added to the invocation's config dirs); a plain recipe name is returned as it is."""
    from agentcompass.core.catalog import registry_recipe

    items = []
    for item in benchmark.split(","):
        generated = registry_recipe(item)
        if generated is None:
            items.append(item)
            continue
        root, name = generated
        if root not in invocation.config_dirs:
            invocation.config_dirs.append(root)
        items.append(name)
    use_configured_location(invocation.config_files)  # a recipe of the user's may name a registry dataset too
    return ",".join(items)


def use_configured_location(config_files: list[Path]) -> None:
    """`registries.harbor.url` of the last --config file that sets it, for this process's registry reads."""
    if not config_files:
        return
    import yaml

    from agentcompass.formats.sources import registry_index

    for path in config_files:
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError):
            continue  # the overlay loader reports a bad --config file in its own words
        url = ((data or {}).get("registries") or {}).get("harbor", {}) if isinstance(data, dict) else {}
        url = url.get("url") if isinstance(url, dict) else None
        if url is not None:
            if not isinstance(url, str) or not url.strip():
                raise UserError(f"--config file '{path}': registries.harbor.url must be a URL or a registry.json path")
            registry_index.configured_location = url.strip()


def print_registry(name: str, group: str | None, config_files: list[Path]) -> int:
    """`list benchmarks --registry harbor`: each dataset's versions with their task counts."""
    from agentcompass.core.catalog import REGISTRY_PREFIXES

    if group not in (None, "benchmarks"):
        raise UserError(f"--registry goes with `agentcompass list benchmarks`, not with {group}; "
                        f"e.g. agentcompass list benchmarks --registry harbor")
    if name not in REGISTRY_PREFIXES:
        raise UserError(f"--registry {name!r}: unknown registry; supported: {', '.join(REGISTRY_PREFIXES)}")
    use_configured_location(config_files)
    from agentcompass.formats.sources.registry import list_datasets

    rows = list_datasets()
    print(f"benchmarks in the {name} registry (run one as {name}:NAME@VERSION):")
    width = max((len(f"{n}@{v}") for n, v, _, _ in rows), default=0)
    for dataset, version, count, description in rows:
        ref = f"{dataset}@{version}"
        print(f"  {ref.ljust(width)}  {count:>5} task{'s' if count != 1 else ' '}  {description}".rstrip())
    return 0
