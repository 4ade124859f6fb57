"""Validate every job first, then run them through Hydra's own run/multirun machinery.

Every job a sweep makes is composed, validated and prepared before anything is
written, so bad input in any of them leaves no trace. The task function Hydra calls
looks the prepared job up by its overrides and runs it, or, in a pooled sweep
(`--sweep-parallel`), adds it to the pool that runs every job's trials at once once
Hydra has visited them all.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from agentcompass.core.config import Invocation, compose, finalize, make_hydra, public_dict
from agentcompass.core.registry import load
from agentcompass.core.errors import UserError
from agentcompass.core.overrides import expand, hydra_value, sweep_suffix
from agentcompass.core.pool import Pool
from agentcompass.core.results import write_json
from agentcompass.core.progress import silence
from agentcompass.core.prepare import PreparedRun, prepare
from agentcompass.core.run_summary import print_summary
from agentcompass.core.runner import execute, raise_outcome
from agentcompass.core.scoring import rate, usd
from agentcompass.core.scheduler import RunFailed
from agentcompass.core.signals import Interrupted

log = structlog.get_logger("agentcompass")


@dataclass
class Job:
    """Hydra's task function: runs the prepared run matching the job's overrides, or pools it."""

    invocation: Invocation
    sweep_keys: set[str]
    argv: list[str]
    prepared: dict[tuple[str, ...], PreparedRun]
    multirun: bool
    pool: Pool | None = None
    interrupted: bool = False
    failures: list[str] = field(default_factory=list)
    run_failures: list[str] = field(default_factory=list)

    def __call__(self, cfg: Any) -> None:
        from hydra.core.hydra_config import HydraConfig

        if self.interrupted:
            return
        job_overrides = tuple(HydraConfig.get().overrides.task)
        try:
            prepared = self.prepared.get(job_overrides) or prepare(
                finalize(cfg, self.invocation, sweep_suffix(list(job_overrides), self.sweep_keys))
            )
        except UserError as exc:
            self.failures.append(str(exc))
            return
        pool = self.pool
        if pool is not None:
            self.outcome(prepared.run_dir, lambda: pool.add(prepared))  # its trials run once every job is added
            return
        def run_alone() -> None:
            summary = execute(prepared, self.argv)
            settle_costs({prepared.run_dir: summary})
            print_summary(without_unrunnable(summary, prepared), prepared.run_dir)

        ran = self.outcome(prepared.run_dir, run_alone)
        if ran and self.multirun:
            write_sweep(prepared.run_dir.parent, self.order())

    def run_pool(self, pool: Pool) -> None:
        """Every pooled job's trials at once; then each job's outcome and summary, as if run alone."""
        if not pool.runs:
            return
        run_root = pool.runs[0].prepared.run_dir.parent
        ran = self.outcome(run_root, pool.run)
        if ran:  # the pooled runs share their endpoints: split each one's cost among all their trials
            settle_costs({run.prepared.run_dir: run.summary for run in pool.runs if run.summary})
        for run in pool.runs:
            complete = self.outcome(run.prepared.run_dir, lambda: raise_outcome(run))
            if ran and complete:
                self.outcome(run.prepared.run_dir, lambda: print_summary(run.summary, run.prepared.run_dir))
        write_sweep(run_root, self.order())

    def order(self) -> list[str]:
        """The jobs' result directory names in the order the sweep gave them (sweep.json and its table keep it)."""
        return [p.run_dir.name for p in self.prepared.values()]

    def outcome(self, run_dir: Path, action: Callable[[], None]) -> bool:
        """Do `action`, recording how it ended instead of raising, so the other jobs of a sweep still run;
        whether the run is complete."""
        try:
            action()
        except Interrupted:
            self.interrupted = True
        except UserError as exc:
            self.failures.append(str(exc))
        except RunFailed as exc:
            self.run_failures.append(f"run failed: {exc}; see log.jsonl in {run_dir}")
        except BrokenPipeError:  # stdout closed (`| head -1`): the run is complete and recorded all the same
            silence(sys.stdout)
            return True
        else:
            return True
        return False


def prepare_all(invocation: Invocation, multirun: bool,
                composed: dict[tuple[str, ...], Any] | None = None) -> tuple[Any, dict[tuple[str, ...], PreparedRun], set[str], list[str]]:
    """Compose, validate and prepare every job; `composed`, when given, receives each job's composed config."""
    jobs, sweep_keys = expand(invocation.overrides, multirun, invocation.typed)
    hydra = make_hydra(invocation.roots())
    prepared: dict[tuple[str, ...], PreparedRun] = {}
    for job in jobs:
        cfg = compose(hydra, job)
        prepared[tuple(job)] = prepare(finalize(cfg, invocation, sweep_suffix(job, sweep_keys)))
        if composed is not None:
            composed[tuple(job)] = cfg
    dirs = [p.run_dir for p in prepared.values()]
    if len(set(dirs)) != len(dirs):
        raise UserError("two jobs of this sweep would share one results directory; sweep over distinct values")
    return hydra, prepared, sweep_keys, jobs


def launch(invocation: Invocation, multirun: bool, argv: list[str],
           after: Callable[[list[Path]], None] | None = None) -> int:
    """Prepare every job, run them, then hand the run directories to `after` (run --analyze), unless interrupted."""
    # Start-up makes what lives as long as the run (the config, thousands of tasks): the cycle collector, which
    # would rescan the growing heap again and again while it is made, is off; then it is frozen out of the
    # collector's sight (the scheduler freezes it again for the trials and thaws it all when they end), so the
    # first collections after start-up do not walk it either. The little cyclic garbage in it is freed after the run.
    gc.disable()
    try:
        composed: dict[tuple[str, ...], Any] = {}
        hydra, prepared, sweep_keys, jobs = prepare_all(invocation, multirun, composed)
    finally:
        gc.enable()
    gc.freeze()
    try:
        code = run_all(invocation, multirun, argv, hydra, prepared, sweep_keys, jobs, composed)
    finally:
        gc.unfreeze()
    if after is not None:
        after([p.run_dir for p in prepared.values()])
    return code


def without_unrunnable(summary: dict[str, Any], prepared: PreparedRun) -> dict[str, Any]:
    """The summary as printed: attempts the harness will never make (eval: instances the predictions file has no
    prediction for) count as unresolved, as the official report counts them, but no rerun can add them, so they
    are said once here and do not make the run read "incomplete ... rerun to finish"."""
    attempts = getattr(prepared.harness, "attempts", None)
    if attempts is None:
        return summary
    never = [task.id for task in prepared.tasks if not attempts(task)]
    if not never:
        return summary
    print(f"note: {len(never)} of {len(prepared.tasks)} selected tasks have no prediction in the file (e.g. {never[0]}): "
          "each counts as unresolved, and a rerun cannot add one; add it to the file, then rerun with the same "
          "--run-name to grade it", flush=True)
    not_run = summary["not_run"] - len(never) * prepared.resolved.run.k
    return {**summary, "not_run": not_run, "complete": not summary["incomplete"] and not_run <= 0}


def run_all(invocation: Invocation, multirun: bool, argv: list[str], hydra: Any, prepared: dict[tuple[str, ...], PreparedRun],
            sweep_keys: set[str], jobs: list[list[str]], composed: dict[tuple[str, ...], Any]) -> int:
    """Every prepared job through Hydra's run (a sweep: its multirun); the exit code."""
    pool = pool_for(list(prepared.values()), argv) if multirun else None
    job = Job(invocation, sweep_keys, argv, prepared, multirun, pool)
    run_root = next(iter(prepared.values())).run_dir.parent
    try:
        if multirun:
            overrides = [*invocation.overrides, f"hydra.sweep.dir={hydra_value(str(run_root))}"]
            hydra.multirun(config_name="config", task_function=job, overrides=overrides)
        else:
            run_composed(hydra, composed[tuple(jobs[0])], job)
    except KeyboardInterrupt:
        job.interrupted = True
        if pool is not None:
            pool.abandon()
    if pool is not None and not job.interrupted:
        job.run_pool(pool)
    if multirun and (run_root / "sweep.json").exists():
        print_sweep(write_sweep(run_root, job.order()), run_root)
    if job.failures:
        raise UserError(job.failures[0])
    for failure in job.run_failures:
        print(f"error: {failure}", file=sys.stderr)
    if job.interrupted:
        print("interrupted: open sandboxes closed, partial summary written; rerun with the same --run-name to resume",
              file=sys.stderr)
        return 130
    return 1 if job.run_failures else 0


def run_composed(hydra: Any, cfg: Any, task_function: Callable[[Any], None]) -> None:
    """What Hydra.run does (hydra-core 1.3), with the config prepare_all composed: Hydra.run would compose it again."""
    from hydra._internal.callbacks import Callbacks
    from hydra.core.utils import configure_log, run_job
    from hydra.types import HydraContext, RunMode

    configure_log(cfg.hydra.hydra_logging, cfg.hydra.verbose)
    if cfg.hydra.mode is None:
        cfg.hydra.mode = RunMode.RUN
    callbacks = Callbacks(cfg)
    callbacks.on_run_start(config=cfg, config_name="config")
    done = run_job(hydra_context=HydraContext(config_loader=hydra.config_loader, callbacks=callbacks),
                   task_function=task_function, config=cfg, job_dir_key="hydra.run.dir", job_subdir_key=None)
    callbacks.on_run_end(config=cfg, config_name="config", job_return=done)
    _ = done.return_value  # raises what the task function raised, as Hydra.run does


def pool_for(prepared: list[PreparedRun], argv: list[str]) -> Pool | None:
    """A Pool when the sweep runs pooled (run.sweep_parallel, --sweep-parallel), checked before anything is written."""
    settings = {(p.resolved.run.sweep_parallel, p.resolved.run.task_concurrency) for p in prepared}
    pooled = {parallel for parallel, _ in settings}
    if len(pooled) > 1:
        raise UserError("run.sweep_parallel differs between the jobs of this sweep; set it once, "
                        "or pass --sweep-parallel")
    if pooled != {True}:
        return None
    if len(settings) > 1:
        raise UserError("a pooled sweep (--sweep-parallel) runs every job under one --task-concurrency; "
                        "sweep run.task_concurrency without --sweep-parallel, or set it once")
    return Pool(argv, prepared[0].resolved.run.task_concurrency)


def settle_costs(summaries: dict[Path, dict[str, Any]]) -> None:
    """Self-hosted runs' cost split by concurrency as `report` splits it (agentcompass.report.runcost); should
    that fail, the summary keeps its sole-cost upper bound, labelled so."""
    try:
        load("service", "settle_costs")(summaries)
    except Exception as exc:  # a cost figure is not worth the run's exit status
        log.warning("could not split the self-hosted cost; the summary shows the sole-cost upper bound", error=str(exc))


SWEEP_FIELDS = ("k", "tasks", "trials", "passed", "failed", "errors", "incomplete", "not_run", "complete", "scoring_rule",
                "pass_at_1", "pass_at_1_tasks", "pass_at_k", "pass_hat_k", "solved_tasks", "solved_rate", "cost_usd", "cost_known",
                "cost_basis", "cost_per_solved_usd", "model_calls", "tokens_in", "tokens_out", "active_s")


def write_sweep(run_root: Path, order: list[str] | None = None) -> list[dict[str, Any]]:
    """sweep.json: every result directory under the run name with its headline figures, this sweep's jobs
    in the order given (`-m model.reasoning=none,high,max`), then any others the run name holds."""
    import json

    rows = []
    rank = {name: index for index, name in enumerate(order or [])}
    found = sorted(run_root.glob("*/summary.json"), key=lambda p: (rank.get(p.parent.name, len(rank)), p.parent.name))
    for summary_path in found:
        try:
            summary = json.loads(summary_path.read_text())
            run_info = json.loads((summary_path.parent / "run.json").read_text())
        except (OSError, ValueError):
            continue
        config = run_info.get("config", {})
        rows.append({
            "dir": summary_path.parent.name,
            "labels": config.get("labels", {}),
            "model": config.get("model", {}).get("name"),
            "reasoning": config.get("model", {}).get("reasoning"),
            "status": run_info.get("status"),
            **{k: summary.get(k) for k in SWEEP_FIELDS},
            # until `agentcompass report` splits it by concurrency or by the bill; no model call: exactly $0; an
            # unknown cost (an unpriced model) is no estimate either
            "cost_is_estimate": bool(summary.get("model_calls")) and summary.get("cost_usd") is not None,
        })
    write_json(run_root / "sweep.json", {"runs": rows})
    return rows


def print_sweep(rows: list[dict[str, Any]], run_root: Path) -> None:
    """One line per job of a sweep, then where sweep.json is; a cost that is an estimate is starred."""
    table = [("RUN", "K", "PASS@1", "OVER", "PASS@K", "SOLVED", "ERRORS", "INCOMPLETE", "COST", "COST/SOLVED")]
    for row in rows:
        star = "*" if row.get("cost_is_estimate") else ""
        table.append((row["labels"].get("suffix") or row["dir"], str(row["k"]), rate(row["pass_at_1"]),
                      f"{row.get('pass_at_1_tasks')}/{row['tasks']}", rate(row["pass_at_k"]),
                      f"{row['solved_tasks']}/{row['tasks']}", str(row["errors"]),
                      str((row.get("incomplete") or 0) + (row.get("not_run") or 0)), usd(row["cost_usd"]) + star,
                      "-" if not row["solved_tasks"] else usd(row["cost_per_solved_usd"]) + star))
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    for line in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip())
    print(f"sweep: {run_root / 'sweep.json'}", flush=True)
    if any(row.get("cost_is_estimate") for row in rows):
        print(f"* an estimate; split by concurrency or by the real bill: agentcompass report {run_root} [--bill FILE|modal]")


def show_config(invocation: Invocation, multirun: bool = False) -> str:
    """The composed config of each job as YAML, secrets redacted; a sweep's jobs as separate documents."""
    from omegaconf import OmegaConf

    jobs, sweep_keys = expand(invocation.overrides, multirun, invocation.typed)
    hydra = make_hydra(invocation.roots())
    documents = []
    for number, job in enumerate(jobs, 1):
        resolved = finalize(compose(hydra, job), invocation, sweep_suffix(job, sweep_keys))
        swept = " ".join(o.lstrip("+~") for o in job if o.partition("=")[0].lstrip("+~") in sweep_keys)
        header = f"# job {number} of {len(jobs)}: {swept}\n" if multirun else ""
        documents.append(header + OmegaConf.to_yaml(public_dict(resolved)))
    return "---\n".join(documents)
