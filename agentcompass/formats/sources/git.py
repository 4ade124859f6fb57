"""Where a directory-based dataset lives: a local path, or a git repository cloned once into a cache.

A recipe names either `source: {path: DIR}` or `source: {git: URL, ref: REF, subdir: DIR}`.
A git source is cloned into `$AGENTCOMPASS_CACHE_DIR/datasets/<hash of URL and ref>` (default
`~/.cache/agentcompass`) the first time and reused after that, so pin `ref` to a tag or a
commit: a branch is read once and not followed. Delete the cache directory to refresh it.

A registry dataset's tasks (sources/registry.py) come from `sparse_checkout`: only their folders, at their
pinned commit, cloned with the user's git (so `url.<base>.insteadOf` mirrors apply).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from agentcompass.core.errors import UserError
from agentcompass.core.paths import cache_root

CLONE_TIMEOUT_S = 1800


RECIPE_HINT = ("check source.git and source.ref in the recipe, or, offline, point it at a local copy of the dataset: "
               "--benchmark-params '{\"path\": \"DIR\"}'")


def git_checkout(url: str, ref: str) -> Path:
    """A checkout of `url` at `ref`, cloned into the cache the first time."""
    def clone(staging: Path) -> None:
        run_git(["clone", "--quiet", "--no-checkout", "--", url, str(staging)], url, ref)
        run_git(["-C", str(staging), "checkout", "--quiet", "--detach", ref], url, ref)

    return built_once(cache_root() / "datasets" / hashlib.sha256(f"{url}\n{ref}".encode()).hexdigest()[:16], clone)


def sparse_checkout(url: str, commit: str, paths: list[str], hint: str = RECIPE_HINT) -> Path:
    """The folders `paths` of `url` at `commit`, cloned into the cache the first time. Sparse and without
    blobs until checkout: a registry repository can hold thousands of task folders, a dataset needs a few."""
    wanted = sorted(set(paths))

    def clone(staging: Path) -> None:
        # --filter: a server that does not filter (a plain file:// remote) sends everything, which git allows.
        run_git(["clone", "--quiet", "--no-checkout", "--filter=blob:none", "--", url, str(staging)], url, commit, hint)
        run_git(["-C", str(staging), "sparse-checkout", "set", "--no-cone", *wanted], url, commit, hint)
        run_git(["-C", str(staging), "checkout", "--quiet", "--detach", commit], url, commit, hint)

    key = hashlib.sha256("\n".join([url, commit, *wanted]).encode()).hexdigest()[:16]
    return built_once(cache_root() / "datasets" / f"sparse-{key}", clone)


def remote_head(url: str, hint: str = RECIPE_HINT) -> str:
    """The commit `url`'s HEAD names now (a registry task without a commit is pinned to it once)."""
    listed = run_git(["ls-remote", "--", url, "HEAD"], url, "HEAD", hint).split()
    if not listed:
        raise UserError(f"cannot read the HEAD commit of git source {url}: it has no HEAD; {hint}")
    return listed[0]


def built_once(target: Path, build: Callable[[Path], None]) -> Path:
    """`target`, built by `build` into a staging folder beside it the first time, then reused."""
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".build-", dir=target.parent))
    try:
        build(staging)
        # Rename is atomic: a concurrent build of the same target loses the race harmlessly.
        try:
            staging.rename(target)
        except OSError:
            if not target.is_dir():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def run_git(args: list[str], url: str, ref: str, hint: str = RECIPE_HINT) -> str:
    """git's standard output; one clear UserError when git fails."""
    # No credential prompts: a private or mistyped URL must fail, not wait for a password.
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true"}
    try:
        done = subprocess.run(["git", *args], capture_output=True, text=True, env=env, timeout=CLONE_TIMEOUT_S)
    except FileNotFoundError:
        raise UserError("a git dataset source needs the git command; install git") from None
    except subprocess.TimeoutExpired:
        raise UserError(f"git source {url}@{ref}: git {args[0]} took over {CLONE_TIMEOUT_S}s; check the URL and "
                        f"network; {hint}") from None
    if done.returncode != 0:
        lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
        reason = lines[-1] if lines else f"git exited {done.returncode}"
        what = "clone" if "clone" in args else "read" if "ls-remote" in args else f"check out ref '{ref}' of"
        raise UserError(f"cannot {what} git source {url}: {reason}; {hint}")
    return done.stdout
