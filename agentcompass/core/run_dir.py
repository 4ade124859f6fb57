"""Where a run's results go: its directory from the labels, the settings recorded there (run.json), and
whether this run may use it (the same settings resume it; others are refused, or with --new-run left
alone for `<run_name>-N` beside it; a directory another process runs in is refused)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from agentcompass.core.errors import UserError
from agentcompass.core.fingerprint import differences
from agentcompass.core.runlock import holder_of, in_use_message
from agentcompass.core.schema import ResolvedConfig


def run_dir_of(resolved: ResolvedConfig) -> Path:
    labels = resolved.labels
    parts = [labels["benchmark"], labels["harness"], labels["model"], labels["env"]]
    if labels.get("suffix"):
        parts.append(labels["suffix"])
    name = "__".join(safe_name(p) for p in parts)
    return Path(resolved.run.results_dir) / str(resolved.run.run_name) / name


def safe_name(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_.=,+@" else "_" for c in text)


def refuse_if_in_use(run_dir: Path) -> None:
    """The run lock's refusal ahead of time (the lock itself, taken when the run opens, still decides)."""
    holder = holder_of(run_dir)
    if holder is not None:
        raise UserError(in_use_message(run_dir, holder))


def resume_target(resolved: ResolvedConfig, prints: dict[str, Any]) -> Path:
    """The run dir to use: this run's own, unless it holds a run with other settings, which is
    refused, or with `run.new_run` (--new-run) left alone for `<run_name>-N` beside it."""
    run_dir = run_dir_of(resolved)
    differ = differences_from(run_dir, prints)
    if not differ:
        return run_dir
    if not resolved.run.new_run:
        raise UserError(f"{run_dir} holds a run with other settings ({'; '.join(differ)}); rerun with its settings "
                        f"to resume it, or pass --new-run to start a new run beside it")
    base, number = str(resolved.run.run_name), 2
    while True:
        resolved.run.run_name = f"{base}-{number}"
        candidate = run_dir_of(resolved)
        if not candidate.exists() or not differences_from(candidate, prints):
            print(f"{'run' if candidate.exists() else 'new run'}: {candidate} ({run_dir} holds other settings: "
                  f"{'; '.join(differ)})",
                  file=sys.stderr, flush=True)
            return candidate
        number += 1


def differences_from(run_dir: Path, prints: dict[str, Any]) -> list[str]:
    """What differs from the settings the run in run_dir recorded (nothing for a new run)."""
    recorded = read_run_json(run_dir).get("fingerprint")
    return differences(recorded, prints) if isinstance(recorded, dict) else []


def read_run_json(run_dir: Path) -> dict[str, Any]:
    try:
        return dict(json.loads((run_dir / "run.json").read_text()))
    except (OSError, ValueError, TypeError):
        return {}
