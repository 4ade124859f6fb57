"""What must match for a rerun to resume a run: every setting that can change a verdict.

The benchmark (params, selection, timeouts, grading), the harness, the model (name, tier,
params), the env with the values its provider actually uses (local's `isolation: auto` is
recorded as the `bwrap` or `none` it picked), k, the timeout multipliers and caps that are set, and the
selected task ids. Settings that
change only speed, places or bookkeeping (concurrency, retries, results_dir, where workspaces
live, engine timeouts, pricing, the endpoint's address) and secrets are left out.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from agentcompass.core.config import SECRET_KEY
from agentcompass.core.limits import fingerprint_part
from agentcompass.core.secret_values import holds_secret
from agentcompass.core.schema import ResolvedConfig

VERDICT_FREE = {
    "description", "overrides", "base_dir",  # recipe prose, per-provider blocks already merged, its folder
    "scoring",  # how verdicts are counted, not what they are: a rerun under another rule resumes
    "pricing", "base_url", "api_key_env",  # cost and where the model is served, not which model
    "root", "app_name", "environment_name", "ready_timeout", "pull_timeout_s", "build_timeout_s", "api_timeout_s", "max_connections",
}


def effective_settings(resolved: ResolvedConfig, provider: Any) -> dict[str, Any]:
    """The env settings the provider resolved to another value: its attribute of the same name."""
    found = {}
    for key, value in (resolved.env.model_extra or {}).items():
        actual = getattr(provider, key, value)
        if isinstance(actual, (str, int, float, bool)) and actual != value:
            found[key] = actual
    return found


def fingerprint(resolved: ResolvedConfig, provider: Any, task_ids: list[str]) -> dict[str, Any]:
    """Flat `group.key.subkey -> value`, so a difference can be named key by key."""
    env = {**resolved.env.model_dump(mode="json"), **effective_settings(resolved, provider)}
    data = {
        "benchmark": resolved.benchmark.model_dump(mode="json"),
        "harness": resolved.harness.model_dump(mode="json"),
        "model": resolved.model.model_dump(mode="json", exclude={"api_key"}),
        "env": env,
        "run": {"k": resolved.run.k, **fingerprint_part(resolved.run)},  # the limits a multiplier changed too
    }
    flat = {key: value for key, value in flatten("", data).items()
            if not any(part in VERDICT_FREE or SECRET_KEY.search(part) for part in key.split("."))
            and not holds_secret(key, value)}  # an Authorization header: a credential, not a setting
    ids = "\n".join(sorted(task_ids)).encode()
    flat["tasks"] = f"{len(task_ids)} tasks, sha256 {hashlib.sha256(ids).hexdigest()[:16]}"
    return flat


def flatten(prefix: str, value: Any) -> dict[str, Any]:
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(flatten(f"{prefix}.{key}" if prefix else str(key), item))
        return out
    return {prefix: value}


def differences(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """`key: old -> new` for every key whose value differs (a missing key shows as `unset`)."""

    def show(key: str, side: dict[str, Any]) -> str:
        text = json.dumps(side[key], default=str) if key in side else "unset"
        return text if len(text) <= 40 else text[:37] + "..."

    current = json.loads(json.dumps(current, default=str))  # compared as run.json holds it
    keys = sorted(set(recorded) | set(current))
    # A setting one side lacks and the other leaves null (one added since the run was recorded, at its default
    # of "not set") changes nothing, so a newer agentcompass still resumes the run.
    return [f"{key}: {show(key, recorded)} -> {show(key, current)}"
            for key in keys if recorded.get(key, ...) != current.get(key, ...)
            and not (recorded.get(key, None) is None and current.get(key, None) is None)]
