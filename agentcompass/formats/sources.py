"""Where a directory-based dataset lives: a local path, or a git repository cloned once into a cache.

A recipe names either `source: {path: DIR}` or `source: {git: URL, ref: REF, subdir: DIR}`.
A git source is cloned into `$AGENTCOMPASS_CACHE_DIR/datasets/<hash of URL and ref>` (default
`~/.cache/agentcompass`) the first time and reused after that, so pin `ref` to a tag or a
commit: a branch is read once and not followed. Delete the cache directory to refresh it.

A Hugging Face hub dataset (`source: {hf: NAME}`) is loaded by `datasets`; before that, one
quick request tells whether the hub answers at all. When it does not (no network), the hub
libraries are switched to offline mode, so the load reads the local cache or fails at once,
instead of retrying with backoff for half a minute.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from agentcompass.core.errors import UserError
from agentcompass.formats.base import source_path
from agentcompass.core.paths import cache_root
from agentcompass.core.schema import Recipe

CLONE_TIMEOUT_S = 1800
HUB_PROBE_TIMEOUT_S = 5.0


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
        raise UserError(f"git source {url}@{ref}: git {args[0]} took over {CLONE_TIMEOUT_S}s; check the URL and network, "
                        f"or use a local copy of the dataset: --benchmark-params '{{\"path\": \"DIR\"}}'") from None
    if done.returncode != 0:
        lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
        reason = lines[-1] if lines else f"git exited {done.returncode}"
        what = "clone" if "clone" in args else f"check out ref '{ref}' of"
        raise UserError(f"cannot {what} git source {url}: {reason}; check source.git and source.ref in the recipe, "
                        f"or, offline, point it at a local copy of the dataset: --benchmark-params '{{\"path\": \"DIR\"}}'")


def hub_endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")


def offline_unless_hub_answers() -> bool:
    """True when the hub is (now) in offline mode: set by the user, or because one quick request got
    no answer at all. Any HTTP answer, an error status included, means the hub is reachable."""
    if os.environ.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE"):
        return True
    import urllib.error  # here: http.client and the rest cost every run start-up ~15 ms, and only hub datasets probe
    import urllib.request

    try:
        urllib.request.urlopen(urllib.request.Request(hub_endpoint(), method="HEAD"), timeout=HUB_PROBE_TIMEOUT_S)
    except urllib.error.HTTPError:
        return False
    except (OSError, ValueError):  # refused, no route, DNS failure, timeout, a malformed HF_ENDPOINT
        go_offline()
        return True
    return False


def go_offline() -> None:
    """Offline mode for huggingface_hub and datasets, also when they were imported already (they read it then)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None:
        constants.HF_HUB_OFFLINE = True
    config = sys.modules.get("datasets.config")
    if config is not None:
        config.HF_HUB_OFFLINE = config.HF_DATASETS_OFFLINE = True
