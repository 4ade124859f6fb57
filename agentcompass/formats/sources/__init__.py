"""Where a directory-based dataset lives: a local path (`source: {path: DIR}`), a git repository
(`source: {git: URL, ref: REF, subdir: DIR}`, sources/git.py), a Hugging Face hub dataset
(`source: {hf: NAME}`, sources/hf.py) or a dataset of Harbor's registry
(`source: {registry: harbor, dataset: NAME, version: VERSION}`, sources/registry.py)."""

from __future__ import annotations

from pathlib import Path

from agentcompass.core.errors import UserError
from agentcompass.core.schema import Recipe
from agentcompass.formats.base import source_path
from agentcompass.formats.sources.git import CLONE_TIMEOUT_S, git_checkout, run_git, sparse_checkout
from agentcompass.formats.sources.hf import HUB_PROBE_TIMEOUT_S, go_offline, hub_endpoint, offline_unless_hub_answers


def dataset_root(recipe: Recipe) -> Path:
    """The dataset directory: `params.path` or `source.path` if given, else the registry's tasks or the git checkout."""
    if recipe.params.get("path"):
        return source_path(recipe)
    if recipe.source.get("registry"):
        from agentcompass.formats.sources.registry import registry_root

        return registry_root(recipe)
    url = recipe.source.get("git")
    if not url:
        return source_path(recipe)
    ref = str(recipe.source.get("ref") or "HEAD")
    checkout = git_checkout(str(url), ref)
    subdir = recipe.source.get("subdir")
    root = checkout / str(subdir) if subdir else checkout
    if not root.is_dir():
        raise UserError(f"benchmark '{recipe.name}': source.subdir '{subdir}' is not a directory in {url}@{ref}; "
                        f"check the repository layout")
    return root


__all__ = ["CLONE_TIMEOUT_S", "HUB_PROBE_TIMEOUT_S", "dataset_root", "git_checkout", "go_offline", "hub_endpoint",
           "offline_unless_hub_answers", "run_git", "sparse_checkout"]
