"""Where agentcompass keeps what outlives a run on this machine: dataset checkouts, CLI bundles, the
running viewers' announcements (AGENTCOMPASS_CACHE_DIR, default ~/.cache/agentcompass)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    configured = os.environ.get("AGENTCOMPASS_CACHE_DIR")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "agentcompass"
