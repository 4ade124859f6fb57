"""What test workers share: one lock per expensive thing (a base image, a built image, an npm bundle), so
parallel workers (pytest-xdist) wait for one build instead of racing it, and a cache dir kept between runs
of the suite (AGENTCOMPASS_TEST_CACHE, default ~/.cache/agentcompass/tests) for what is keyed by content."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def cache_dir(*parts: str) -> Path:
    root = Path(os.environ.get("AGENTCOMPASS_TEST_CACHE") or Path.home() / ".cache" / "agentcompass" / "tests")
    path = root.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextmanager
def exclusive(name: str) -> Iterator[None]:
    """Hold the machine-wide lock `name` (across test workers and concurrent runs of the suite)."""
    with open(cache_dir("locks") / f"{name.replace('/', '+')}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
