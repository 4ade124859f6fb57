"""One run: prepared (agentcompass.core.prepare), its session opened (agentcompass.core.session), its
pending trials scheduled, its outcome raised; the summary written and printed (agentcompass.core.run_summary)."""

from __future__ import annotations

from typing import Any

from agentcompass.core.prepare import PreparedRun
from agentcompass.core.progress import Progress
from agentcompass.core.scheduler import RunFailed, RunStopped, Scheduler
from agentcompass.core.schema import ResolvedConfig
from agentcompass.core.session import OpenRun, opened


def execute(prepared: PreparedRun, argv: list[str]) -> dict[str, Any]:
    """Run (or resume) the trials; returns the summary. Raises Interrupted on Ctrl-C, RunStopped on an
    error no trial can get past, RunFailed when a worker failed outside any trial."""
    with opened(prepared, argv) as run:
        # A provider may run every trial itself (gcp_batch: ONE GCP Batch job grades them all).
        run_trials = getattr(prepared.provider, "run_trials", None)
        if run_trials is not None:
            with progress_for([run], title_of(prepared.resolved)) as progress:
                run_trials(prepared, run.lane.pending, run.lane.store, progress)
        else:
            schedule([run], prepared.resolved.run.task_concurrency, title_of(prepared.resolved),
                     prepared.resolved.run.processes)
    raise_outcome(run)
    return run.summary


def raise_outcome(run: OpenRun) -> None:
    """A run that stopped or failed says so, as the exception its caller reports."""
    if run.lane.fatal is not None:
        raise RunStopped(str(run.lane.fatal))
    if run.lane.failures:
        raise RunFailed(run.lane.failures[0])


def title_of(resolved: ResolvedConfig) -> str:
    labels = resolved.labels
    return f"{labels['benchmark']} · {labels['harness']} · {labels['model']} · {labels['env']}"


def schedule(runs: list[OpenRun], concurrency: int, title: str, processes: int | None = None) -> None:
    """The pending trials of every run in one scheduler under one concurrency cap, with one progress display."""
    lanes = [run.lane for run in runs]
    with progress_for(runs, title) as progress:
        for lane in lanes:
            lane.runner.pacer.on_waiting = progress.waiting
            lane.runner.pacer.on_lowered = lambda limit, reason, label=lane.label: progress.lowered(limit, reason, label)
        Scheduler(lanes, concurrency, progress, processes).run()


def progress_for(runs: list[OpenRun], title: str) -> Progress:
    done = [result for run in runs for result in run.done]
    return Progress(len(done) + sum(len(run.lane.pending) for run in runs), done=len(done),
                    passed=sum(r.status == "passed" for r in done), errors=sum(r.status == "error" for r in done),
                    title=title)
