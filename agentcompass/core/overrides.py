"""From CLI flags to Hydra overrides, and the expansion of sweeps into jobs."""

from __future__ import annotations

import json
import math
from typing import Any

from agentcompass.core.config import GROUPS
from agentcompass.core.errors import UserError

# JSON-param flag -> where its keys go in the composed config
PARAM_TARGETS = {
    "benchmark_params": "benchmark.params",
    "harness_params": "harness",
    "env_params": "env",
    "model_params": "model.params",
}
GROUP_KEYS = {package for _, package in GROUPS.values()}


def hydra_value(value: Any) -> str:
    """A Python value as Hydra override grammar."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            raise UserError(f"numbers must be finite, got {value}")
        return repr(value)
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace("'", "\\'")
        return f"'{escaped}'"
    if isinstance(value, list):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{hydra_value(v)}" for k, v in value.items()) + "}"
    raise UserError(f"unsupported value {value!r}")


def flatten(prefix: str, data: dict[str, Any]) -> list[str]:
    """Deep-merge semantics: one `++key.path=value` override per leaf."""
    out: list[str] = []
    for key, value in data.items():
        if not isinstance(key, str) or not key.replace("_", "").replace("-", "").isalnum():
            raise UserError(f"parameter names must be simple identifiers, got {key!r} under {prefix}")
        path = f"{prefix}.{key}"
        if isinstance(value, dict) and value:
            out += flatten(path, value)
        else:
            out.append(f"++{path}={hydra_value(value)}")
    return out


def parse_json_object(flag: str, text: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"--{flag.replace('_', '-')} is not valid JSON ({exc.msg} at column {exc.colno}); pass an object such as '{{\"limit\": 2}}'") from exc
    if not isinstance(data, dict):
        raise UserError(f"--{flag.replace('_', '-')} must be a JSON object such as '{{\"limit\": 2}}', got {type(data).__name__}")
    return data


def expand(overrides: list[str], multirun: bool, typed: dict[str, str] | None = None) -> tuple[list[list[str]], set[str]]:
    """The jobs a (multi)run makes, as Hydra will name their overrides, and the keys that vary.

    `typed` maps an override to what the user typed, for messages."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except Exception as exc:
        raise UserError(f"bad override: {' '.join(str(exc).split())}") from exc
    sweeps = [o for o in parsed if o.is_sweep_override()]
    if not multirun:
        if sweeps:
            line = str(sweeps[0].input_line)
            shown = (typed or {}).get(line, f"'{line}'")
            raise UserError(f"{shown} sweeps several values; add -m (--multirun) to run each")
        return [list(overrides)], set()
    try:
        jobs = BasicSweeper.split_arguments(parsed, None)[0]
    except Exception as exc:
        raise UserError(f"cannot expand the sweep: {' '.join(str(exc).split())}") from exc
    return jobs, {o.get_key_element().lstrip("+~") for o in sweeps}


def sweep_suffix(job: list[str], sweep_keys: set[str]) -> str:
    """What tells this job's directory apart, beyond benchmark/harness/model/env."""
    parts = []
    for override in job:
        key, _, value = override.partition("=")
        bare = key.lstrip("+~")
        if bare in sweep_keys and bare not in GROUP_KEYS and not bare.startswith("model.name"):
            parts.append(f"{bare}={value}")
    return ",".join(parts)
