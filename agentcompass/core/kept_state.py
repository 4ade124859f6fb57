"""What an attempt keeps so that it can be graded again without its agent (`agentcompass regrade`), in the
attempt's folder under `kept/`:

- `kept/outcome.json`: the agent's outcome as the format graded it (its submission: SWE-bench's patch,
  CooperBench's merged diff; what the format collected), written just before grading;
- where the verifier runs in the agent's own sandbox (Harbor's shared mode, Terminal-Bench), the sandbox's final
  filesystem as its env can tell it: `kept/changes.tar` (docker: what the container changed since its image,
  deletions as whiteouts) and `kept/state.json` (kept or why not, its size, the cap). Formats graded in a fresh
  sandbox need no filesystem: their submission and the collected artifacts (`artifacts/`) are what is graded.

Keeping never fails an attempt: an archive that cannot be made is a note in state.json, and a regrade of that
attempt says why it cannot be done. What is kept is the agent's work, never a verdict: a regrade restores it into
a fresh sandbox and runs the verifier with every check of a normal run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from agentcompass.core.results import write_atomic

if TYPE_CHECKING:
    from agentcompass.core.context import TrialContext
    from agentcompass.core.sandbox import Sandbox
    from agentcompass.core.task import AgentOutcome

log = structlog.get_logger("agentcompass")
KEPT_DIR = "kept"
OUTCOME_FILE = f"{KEPT_DIR}/outcome.json"
STATE_FILE = f"{KEPT_DIR}/state.json"
ARCHIVE_FILE = f"{KEPT_DIR}/changes.tar"
MB = 1024 * 1024


def keep_outcome(trial: "TrialContext", outcome: "AgentOutcome") -> None:
    """The outcome a format grades (the usage stays in the attempt's result, where it is counted once)."""
    write_atomic(trial.dir / OUTCOME_FILE, outcome.model_dump_json(exclude={"usage"}))


def keep_sandbox_state(sandbox: "Sandbox", trial: "TrialContext", cap_mb: float) -> dict[str, Any]:
    """The sandbox's changes since its image as kept/changes.tar, with kept/state.json saying what was kept (or
    why nothing was: an env that cannot list its changes, a state over the cap, a failure to read it)."""
    archive = trial.dir / ARCHIVE_FILE
    export = getattr(sandbox, "export_changes", None)
    cap_bytes = int(cap_mb * MB)
    state: dict[str, Any] = {"kept": False, "cap_bytes": cap_bytes}
    if cap_bytes <= 0:
        state["reason"] = "run.kept_state_cap_mb is 0: no filesystem state is kept"
    elif not callable(export):
        state["reason"] = "this env cannot list what its sandbox changed (docs/regrade.md: modal, gcp)"
    else:
        os.makedirs(archive.parent, exist_ok=True)
        try:
            state.update(kept=True, **export(archive, cap_bytes))
        except Exception as exc:  # noqa: BLE001 - keeping is a service, never a reason to fail the attempt
            _remove(archive)
            size = getattr(exc, "size", None)
            if isinstance(size, int):  # the provider's OverCap
                state.update(bytes=size, reason=f"the sandbox's changes ({size / MB:.1f} MB) exceed run.kept_state_cap_mb "
                             f"({cap_mb:g} MB): not kept; raise the cap to keep them")
            else:
                state["reason"] = f"cannot archive the sandbox's changes: {exc}"
                log.warning("kept state not archived", task=trial.task_id, attempt=trial.attempt, error=str(exc))
    write_atomic(trial.dir / STATE_FILE, json.dumps(state, indent=1))
    return state


def kept_summary(state: dict[str, Any]) -> dict[str, Any]:
    """The attempt's `details.kept_state`: kept or not, its size, and why not."""
    out: dict[str, Any] = {"kept": bool(state.get("kept"))}
    if "bytes" in state:
        out["bytes"] = state["bytes"]
    if not state.get("kept") and state.get("reason"):
        out["reason"] = state["reason"]
    return out


def _remove(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
