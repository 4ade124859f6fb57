"""A Hugging Face hub dataset (`source: {hf: NAME}`) is loaded by `datasets`; before that, one
quick request tells whether the hub answers at all. When it does not (no network), the hub
libraries are switched to offline mode, so the load reads the local cache or fails at once,
instead of retrying with backoff for half a minute.
"""

from __future__ import annotations

import os
import sys

HUB_PROBE_TIMEOUT_S = 5.0


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
