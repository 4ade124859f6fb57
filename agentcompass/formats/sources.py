"""Where a directory-based dataset lives: a local path, or a git repository cloned once into a cache.

A recipe names either `source: {path: DIR}` or `source: {git: URL, ref: REF, subdir: DIR}`.
A git source is cloned into `$AGENTCOMPASS_CACHE_DIR/datasets/<hash of URL and ref>` (default
`~/.cache/agentcompass`) the first time and reused after that, so pin `ref` to a tag or a
commit: a branch is read once and not followed. Delete the cache directory to refresh it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from agentcompass.errors import UserError
from agentcompass.formats.base import source_path
from agentcompass.schema import Recipe

CLONE_TIMEOUT_S = 1800


def cache_root() -> Path:
    configured = os.environ.get("AGENTCOMPASS_CACHE_DIR")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "agentcompass"


def dataset_root(recipe: Recipe) -> Path:
    """The dataset directory: `params.path` or `source.path` if given, else the git checkout."""
    url = recipe.source.get("git")
    if recipe.params.get("path") or not url:
        return source_path(recipe)
    ref = str(recipe.source.get("ref") or "HEAD")
    checkout = git_checkout(str(url), ref)
    subdir = recipe.source.get("subdir")
    root = checkout / str(subdir) if subdir else checkout
    if not root.is_dir():
        raise UserError(f"benchmark '{recipe.name}': source.subdir '{subdir}' is not a directory in {url}@{ref}; "
                        f"check the repository layout")
    return root


def git_checkout(url: str, ref: str) -> Path:
    """A checkout of `url` at `ref`, cloned into the cache the first time."""
    target = cache_root() / "datasets" / hashlib.sha256(f"{url}\n{ref}".encode()).hexdigest()[:16]
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".clone-", dir=target.parent))
    try:
        run_git(["clone", "--quiet", "--no-checkout", "--", url, str(staging)], url, ref)
        run_git(["-C", str(staging), "checkout", "--quiet", "--detach", ref], url, ref)
        # Rename is atomic: a concurrent clone of the same source loses the race harmlessly.
        try:
            staging.rename(target)
        except OSError:
            if not target.is_dir():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def run_git(args: list[str], url: str, ref: str) -> None:
    # No credential prompts: a private or mistyped URL must fail, not wait for a password.
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true"}
    try:
        done = subprocess.run(["git", *args], capture_output=True, text=True, env=env, timeout=CLONE_TIMEOUT_S)
    except FileNotFoundError:
        raise UserError("a git dataset source needs the git command; install git") from None
    except subprocess.TimeoutExpired:
        raise UserError(f"git source {url}@{ref}: git {args[0]} took over {CLONE_TIMEOUT_S}s; check the URL and network") from None
    if done.returncode != 0:
        lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
        reason = lines[-1] if lines else f"git exited {done.returncode}"
        what = "clone" if "clone" in args else f"check out ref '{ref}' of"
        raise UserError(f"cannot {what} git source {url}: {reason}; check source.git and source.ref in the recipe")
