"""A regrade prepared like a run: the original run's recorded settings (run.json), its tasks (with a changed verifier
where `--verifier-from` gives one), a new run name under the same results root, and the replay in place of the
agent. Everything is checked before a byte is written; a rerun with the same name resumes it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agentcompass.core.errors import UserError
from agentcompass.core.prepare import PreparedRun, prepare
from agentcompass.core.run_dir import read_run_json, run_dir_of
from agentcompass.core.schema import SPEND_CAPS, ResolvedConfig
from agentcompass.core.secret_values import MASK
from agentcompass.regrade.replay import RegradeHarness, ReplayRunner
from agentcompass.regrade.source import OriginalRun
from agentcompass.regrade.verifier import with_verifier_from

STAND_IN = "nop"  # prepared as a harness that drives no model; the replay takes the agent's place


def prepare_regrade(run_dir: Path, tasks: list[str] | None, verifier_from: Path | None,
                    run_name: str | None) -> PreparedRun:
    original = OriginalRun.open(run_dir)
    if verifier_from is not None and not verifier_from.is_dir():
        raise UserError(f"--verifier-from {verifier_from}: no such folder; pass a folder holding the changed task folders")
    try:
        resolved = ResolvedConfig.model_validate(original.info["config"])
    except ValidationError as exc:
        first = exc.errors()[0]
        raise UserError(f"{run_dir}/run.json: its config does not validate ({'.'.join(map(str, first['loc']))}: "
                        f"{first['msg']}); regrade it with the agentcompass version that ran it") from exc
    # A credential run.json masked is left to where the env finds it otherwise (its variables, its own files).
    extra = resolved.env.model_extra or {}
    for key in [k for k, v in extra.items() if v == MASK]:
        del extra[key]
    old_name = str(resolved.run.run_name)
    name = run_name or f"{old_name}-regrade"
    if name == old_name:
        raise UserError(f"--run-name {name} is the original run's own name; a regrade is a new run beside it: pick another")
    results_root = run_dir.resolve().parent.parent
    # No agent runs, so no model is called: the original's spend caps (held at the model gateway) have nothing to cap.
    resolved.run = resolved.run.model_copy(update={"run_name": name, "results_dir": str(results_root), "new_run": False,
                                                   "keep_environment": False, "retry_errors": True,
                                                   **{cap: None for cap in SPEND_CAPS}})
    if tasks:
        unknown = sorted(set(tasks) - original.task_ids())
        if unknown:
            raise UserError(f"--tasks: '{unknown[0]}' has no attempt in {run_dir}; pick among "
                            f"{', '.join(sorted(original.task_ids())[:10])}")
        selected = resolved.benchmark.params.get("sample_ids")
        resolved.benchmark.params["sample_ids"] = [t for t in (selected or tasks) if t in tasks]
    target = run_dir_of(resolved)
    check_same_source(target, run_dir, verifier_from)
    prepared = prepare(resolved, harness_name=STAND_IN)
    if getattr(prepared.provider, "run_trials", None) is not None:  # gcp_batch grades submissions in one job of its own
        raise UserError(f"{run_dir} was graded by env '{resolved.labels.get('env')}', which runs every attempt itself; "
                        "regrade runs each attempt in a sandbox of its own: regrade a run made on docker, local, modal or gcp")
    if verifier_from is not None:
        prepared.tasks = with_verifier_from(resolved.benchmark, resolved.run, prepared.tasks, verifier_from)
    prepared.harness = RegradeHarness(original)
    prepared.trial_runner = ReplayRunner
    prepared.run_info = {"regrade_of": link_of(original, verifier_from)}
    return prepared


def link_of(original: OriginalRun, verifier_from: Path | None) -> dict[str, Any]:
    """What run.json's `regrade_of` records: the original run's folder and name, and the verifier's source."""
    return {"run_dir": str(original.dir.resolve()), "run_name": original.info["config"]["run"].get("run_name"),
            "verifier_from": str(verifier_from.resolve()) if verifier_from else None}


def check_same_source(target: Path, run_dir: Path, verifier_from: Path | None) -> None:
    """A regrade resumed must regrade the same run with the same verifier: mixing two would pair verdicts of two."""
    recorded = read_run_json(target).get("regrade_of")
    if not recorded and (target / "run.json").exists():
        raise UserError(f"{target} holds a run that is no regrade; pass another --run-name")
    if not isinstance(recorded, dict):
        return
    wanted = {"run_dir": str(run_dir.resolve()),
              "verifier_from": str(verifier_from.resolve()) if verifier_from else None}
    for key, value in wanted.items():
        if recorded.get(key) != value:
            raise UserError(f"{target} regrades {key.replace('_', ' ')} {recorded.get(key)}, not {value}; resume it with "
                            f"the same arguments, or pass another --run-name")
