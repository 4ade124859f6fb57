"""One run: load tasks, check everything, then schedule the trials and write the results."""

from __future__ import annotations

import json
import platform
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import structlog

from agentcompass.core.config import is_secret_override, public_dict
from agentcompass.core.errors import UserError
from agentcompass.formats.base import TaskFormat
from agentcompass.harnesses.base import check_agent_tools
from agentcompass.core.logs import RunLog, attributed_to
from agentcompass.core.pacing import Pacer
from agentcompass.core.progress import Progress, run_prefix
from agentcompass.core.registry import resolve
from agentcompass.core.fingerprint import differences, effective_settings, fingerprint
from agentcompass.core.results import ResultsStore, TrialResult, active_seconds, now_iso, write_json
from agentcompass.core.scoring import base_note, incomplete_note, rate, rule_for, summarize, usd
from agentcompass.core.runlock import RunLock, holder_of, in_use_message
from agentcompass.core.scheduler import Lane, RetryPolicy, RunFailed, RunStopped, Scheduler
from agentcompass.core.schema import ResolvedConfig
from agentcompass.core.shards import check_processes
from agentcompass.core.task import Task, Usage
from agentcompass.core.trial import OpenSandboxes, TrialRunner

log = structlog.get_logger("agentcompass")
SOLE_COST = "sole-cost upper bound (self-hosted; agentcompass report splits it by concurrency)"
SUMMARY_EVERY_S = 10.0  # summary.json and the session's end in run.json are refreshed this often
VERSIONED = ("agentcompass", "hydra-core", "omegaconf", "pydantic", "docker", "swebench", "mini-swe-agent", "litellm")


def run_dir_of(resolved: ResolvedConfig) -> Path:
    labels = resolved.labels
    parts = [labels["benchmark"], labels["harness"], labels["model"], labels["env"]]
    if labels.get("suffix"):
        parts.append(labels["suffix"])
    name = "__".join(safe_name(p) for p in parts)
    return Path(resolved.run.results_dir) / str(resolved.run.run_name) / name


def safe_name(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_.=,+@" else "_" for c in text)


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for dist in VERSIONED:
        try:
            found[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return found


@dataclass
class PreparedRun:
    """Everything checked before a byte is written."""

    resolved: ResolvedConfig
    task_format: TaskFormat
    tasks: list[Task]
    provider: Any
    harness: Any
    run_dir: Path
    fingerprint: dict[str, Any]


def prepare(resolved: ResolvedConfig, harness_name: str | None = None) -> PreparedRun:
    recipe = resolved.benchmark
    task_format = resolve("format", recipe.format)(recipe)
    tasks = task_format.load()
    harness_cfg = resolved.harness
    harness_cls = resolve("harness", harness_name or harness_cfg.impl or harness_cfg.name)
    check_agent_tools(harness_cls, harness_name or harness_cfg.name, tasks)
    env = resolved.env
    provider = resolve("provider", env.impl or env.name)(**resolved.settings_of(env), keep=resolved.run.keep_environment)
    check_processes(resolved, provider, harness_cls)
    check_harness = getattr(provider, "check_harness", None)  # e.g. local: a model's commands need a fence
    if check_harness is not None:
        check_harness(harness_cls, harness_name or harness_cfg.name)
    check_env = getattr(task_format, "check_env", None)  # a format may need what only some envs offer (coop)
    if check_env is not None:
        check_env(provider)
    check_each_task(tasks, task_format, provider, env.name)
    needs_model = getattr(harness_cls, "needs_model", False)
    if needs_model and resolved.model.name == "none":
        raise UserError(f"harness '{harness_cfg.name}' needs a model; pass a preset (agentcompass list models) or a provider/model string")
    if needs_model:
        from agentcompass.core.models import check_model

        check_model(resolved.model, request=False)  # a missing key: before anything slow
    # The run directory's refusals come before the harness, which may import litellm (seconds), and the model request.
    prints = fingerprint(resolved, provider, [t.id for t in tasks])
    run_dir = resume_target(resolved, prints)
    refuse_if_in_use(run_dir)
    harness = harness_cls(**resolved.settings_of(harness_cfg))
    check_tasks = getattr(harness, "check_tasks", None)  # e.g. predictions: refuse a file for another benchmark
    if check_tasks is not None:
        check_tasks(tasks)
    if getattr(harness_cls, "uses_gateway", False):
        from agentcompass.gateway.server import check_gateway

        check_gateway(resolved, tasks, provider)
    if needs_model:
        from agentcompass.core.models import check_model, litellm_name

        api_kind = getattr(harness, "api_kind", None)  # an agent calling through the gateway: its URL and API
        via_gateway = getattr(harness_cls, "uses_gateway", False) and api_kind is not None
        check_model(resolved.model, request=resolved.run.model_check and not via_gateway)
        if via_gateway and resolved.run.model_check:
            from agentcompass.gateway.check import check_endpoint

            check_endpoint(resolved.model, api_kind(resolved.model))
        resolved.labels["model_name"] = litellm_name(resolved.model)  # as mini-swe-agent names it in predictions
    fetch = getattr(harness, "prepare", None)  # big downloads (an installed CLI's bundle) only once all else passed
    if fetch is not None:
        fetch()
    return PreparedRun(resolved, task_format, tasks, provider, harness, run_dir, prints)


def refuse_if_in_use(run_dir: Path) -> None:
    """The run lock's refusal ahead of time (the lock itself, taken when the run opens, still decides)."""
    holder = holder_of(run_dir)
    if holder is not None:
        raise UserError(in_use_message(run_dir, holder))


def check_each_task(tasks: list[Task], task_format: TaskFormat, provider: Any, env_name: str) -> None:
    """Each task against the env (its sandbox, and a fresh grading sandbox where it has one). A task the format or
    the env cannot run is refused alone: its trials record why, the others run, and one warning line names it.
    A run whose every task is refused is refused itself (one line, exit 2), as nothing would run."""
    grading_spec = getattr(task_format, "grading_spec", None)
    for task in tasks:
        if task.refusal:
            continue
        spec = task.sandbox_spec(task.id, {}, None)
        try:
            for checked in (spec, grading_spec(task, spec) if grading_spec else None):
                if checked is not None:
                    provider.check(checked)
        except UserError as exc:
            task.refusal = str(exc)
    refused = [task for task in tasks if task.refusal]
    if refused and len(refused) == len(tasks):
        raise UserError(str(refused[0].refusal))
    for task in refused:
        line = f"warning: task '{task.id}' is refused on {env_name} and recorded as an error: {task.refusal}"
        if line not in REFUSALS_SHOWN:  # validate prepares a run per harness: say it once
            REFUSALS_SHOWN.add(line)
            print(line, file=sys.stderr, flush=True)


REFUSALS_SHOWN: set[str] = set()


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


@dataclass
class OpenRun:
    """A run whose session is open: its lane of the schedule, the trials done before, its summary once closed."""

    prepared: PreparedRun
    lane: Lane
    done: list[TrialResult]
    summary: dict[str, Any] = field(default_factory=dict)


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


@contextmanager
def opened(prepared: PreparedRun, argv: list[str], pacers: dict[Any, Pacer] | None = None,
           label: str = "") -> Iterator[OpenRun]:
    """The run's session: its lock, run.json, log.jsonl and periodic summary while the `with` body
    schedules its trials; on the way out its status (completed, stopped, failed, interrupted) and summary."""
    with RunLock(prepared.run_dir), gateway_for(prepared) as gateway:
        resolved, run_dir = prepared.resolved, prepared.run_dir
        store = ResultsStore(run_dir)
        store.repair()
        finished = store.finished(warn=True)
        k = resolved.run.k
        wanted = [(t, a) for t in prepared.tasks for a in range(1, k + 1)]
        attempts = getattr(prepared.harness, "attempts", None)  # e.g. predictions: only the instances the file has
        if attempts is not None:
            wanted = [(t, a) for t, a in wanted if attempts(t)]
        if finished:
            pending = [(t, a) for t, a in wanted if should_run(finished.get((t.id, a)), resolved.run.retry_errors)]
            pending_keys = {(t.id, a) for t, a in pending}
            done = [finished[(t.id, a)] for t, a in wanted if (t.id, a) in finished and (t.id, a) not in pending_keys]
        else:  # a new run (the common case, and thousands of trials long): everything is pending
            pending, pending_keys, done = wanted, set(), []
        run_info = read_run_json(run_dir)
        if run_info:
            retried = sum(key in finished for key in pending_keys)
            print(f"{run_prefix(label)}resuming: {len(done)} of {len(wanted)} trials done"
                  + (f", {retried} errors to retry" if retried else ""), file=sys.stderr, flush=True)
        config = public_dict(resolved)
        config["env"].update(effective_settings(resolved, prepared.provider))  # what ran, e.g. bwrap, not auto
        session = {"started_at": now_iso(), "ended_at": None, "status": "running"}
        run_info.update({
            "config": config,
            "fingerprint": prepared.fingerprint,
            "versions": versions(),
            "command": redact_argv(argv),
            "started_at": run_info.get("started_at") or session["started_at"],
            "finished_at": None,
            "status": "running",
            "run_dir": str(run_dir),
            "tasks": [t.id for t in prepared.tasks],  # the selection: every rate's tasks, whatever has run
        })
        if finished:
            run_info.setdefault("resumed_at", []).append(session["started_at"])
        run_info.setdefault("sessions", []).append(session)
        task_ids = [t.id for t in prepared.tasks]

        def checkpoint(task_format: Any = None) -> dict[str, Any]:
            """run.json with this session's end so far, then summary.json: a kill loses at most one period."""
            session["ended_at"] = now_iso()
            write_json(run_dir / "run.json", run_info)
            return write_summary(run_dir, task_ids, resolved, run_info["sessions"], task_format, store.recorded(), store)

        checkpoint()
        runner = TrialRunner(
            prepared.task_format, prepared.harness, prepared.provider, resolved.model,
            str(resolved.run.run_name), resolved.labels, OpenSandboxes(), resolved.run.keep_environment,
            pacer_for(resolved, prepared.provider, {} if pacers is None else pacers), gateway,
        )
        lane = Lane(runner, store, RetryPolicy(resolved.run.max_retries, resolved.run.retry_backoff_s), pending, label)
        run = OpenRun(prepared, lane, done)
        status = "completed"
        with RunLog(run_dir / "log.jsonl"), Periodically(checkpoint, SUMMARY_EVERY_S):
            with attributed_to(run_dir):
                log.info("run started", run_dir=str(run_dir), pending=len(pending), finished=len(done))
            try:
                yield run
                # a fatal error stopped this run's scheduling (RunStopped); a worker failed (RunFailed)
                status = "stopped" if lane.fatal is not None else "failed" if lane.failures else "completed"
            except KeyboardInterrupt:  # Interrupted: Ctrl-C, SIGTERM, SIGHUP
                status = "interrupted"
                raise
            except BaseException:  # anything else: never "completed"
                status = "failed"
                raise
            finally:
                session["status"] = status
                run_info.update({"finished_at": now_iso(), "status": status})
                run.summary = checkpoint(prepared.task_format)
                with attributed_to(run_dir):
                    log.info("run finished", status=status, **{k_: run.summary[k_] for k_ in ("passed", "failed", "errors")})


@contextmanager
def gateway_for(prepared: PreparedRun) -> Iterator[Any]:
    """The model gateway of a harness that uses one: started before the run writes anything (a port in
    use is the user's to fix), stopped when the run ends however it ends."""
    if not getattr(prepared.harness, "uses_gateway", False):
        yield None
        return
    from agentcompass.gateway.server import Gateway

    with Gateway.for_run(prepared.resolved) as gateway:
        yield gateway


def pacer_for(resolved: ResolvedConfig, provider: Any, shared: dict[Any, Pacer]) -> Pacer:
    """run.provider_limit / run.env_open_qps, else the provider's own defaults (modal: 4 creations a second);
    the runs of a pooled sweep on one env share its pacer, as they share the account's limits."""
    limit = resolved.run.provider_limit or getattr(provider, "default_provider_limit", None)
    qps = resolved.run.env_open_qps or getattr(provider, "default_open_qps", None)
    return shared.setdefault((resolved.labels.get("env"), limit, qps), Pacer(limit, qps))


def should_run(recorded: TrialResult | None, retry_errors: bool) -> bool:
    return recorded is None or (retry_errors and recorded.status == "error")


class Periodically:
    """Calls `action` every `every_s` seconds in a background thread for the duration of a `with`."""

    def __init__(self, action: Callable[[], Any], every_s: float) -> None:
        self.action, self.every_s = action, every_s
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="summary", daemon=True)

    def _loop(self) -> None:
        while not self.stop.wait(self.every_s):
            try:
                self.action()
            except Exception as exc:  # a refresh that fails (disk full) must not end the run; the next may work
                log.warning("could not refresh the summary", error=str(exc))

    def __enter__(self) -> "Periodically":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def write_summary(run_dir: Path, task_ids: list[str], resolved: ResolvedConfig, sessions: list[dict[str, Any]],
                  task_format: Any, recorded: list[TrialResult], store: ResultsStore | None = None) -> dict[str, Any]:
    """summary.json (and a format's derived files) from `recorded`, the trials trials.jsonl holds, and what
    the run's abandoned tries spent."""
    selected = set(task_ids)
    results = [r for r in recorded if r.task_id in selected]
    abandoned = [a for a in store.abandoned() if a.task_id in selected] if store is not None else []
    superseded = [r for r in store.superseded if r.task_id in selected] if store is not None else []
    rule = rule_for(resolved.benchmark.scoring, resolved.run.count_errors_as_failures)
    unrecorded = Usage.total([*(a.usage for a in abandoned if not a.superseded), *(r.usage for r in superseded)])
    summary = summarize(results, task_ids, resolved.run.k, rule, unrecorded)
    pricing = resolved.model.pricing
    if pricing is not None and pricing.hourly_usd is not None and summary["cost_usd"] is not None:
        # each trial charged its own generation time: concurrent trials share the endpoint (split at the run's end)
        summary["cost_basis"] = SOLE_COST
    summary.update({
        "count_errors_as_failures": resolved.run.count_errors_as_failures,
        "abandoned_tries": sum(not a.superseded for a in abandoned), "superseded_records": len(superseded),
        "active_s": round(active_seconds(sessions), 3), "updated_at": now_iso(),
    })
    summarize_more = getattr(task_format, "summarize", None)  # a format's own figures (CooperBench: merge conflicts)
    if summarize_more is not None:
        summary.update(summarize_more(results))
    write_json(run_dir / "summary.json", summary)
    write_artifacts = getattr(task_format, "write_artifacts", None)
    if write_artifacts is not None:  # files a format derives from trials.jsonl, e.g. SWE-bench's predictions.jsonl
        write_artifacts(run_dir, results, task_ids=task_ids,
                        model_name=resolved.labels.get("model_name") or resolved.labels.get("model"))
    return summary


def read_run_json(run_dir: Path) -> dict[str, Any]:
    try:
        return dict(json.loads((run_dir / "run.json").read_text()))
    except (OSError, ValueError, TypeError):
        return {}


def redact_argv(argv: list[str]) -> list[str]:
    """The command line as typed, the API key's value replaced."""
    out, hide = [], False
    for arg in argv:
        if hide:
            out.append("***")
            hide = False
        elif arg == "--model-api-key":
            out.append(arg)
            hide = True
        elif arg.startswith("--model-api-key="):
            out.append("--model-api-key=***")
        elif is_secret_override(arg):
            out.append(f"{arg.partition('=')[0]}=***")
        else:
            out.append(arg)
    return out


def print_summary(summary: dict[str, Any], run_dir: Path) -> None:
    """The end-of-run lines; every rate with its base and what it leaves out, unknown costs as unknown."""
    k = summary["k"]
    unattempted = summary["tasks_unattempted"]
    cost = usd(summary["cost_usd"]) + ("" if summary["cost_known"] else " (no price for the model)")
    if summary.get("cli_cost_usd") is not None:  # an installed CLI's own estimate, beside the priced calls
        cost += f" (the CLI's own figure ${summary['cli_cost_usd']:.4f}, {summary['cli_cost_difference_usd']:+.4f})"
    per_solved = summary.get("cost_per_solved_usd")
    basis = summary.get("cost_basis")
    lines = [
        f"tasks {summary['tasks']}" + (f" ({unattempted} unattempted)" if unattempted else "")
        + f"  trials {summary['trials']}/{summary['trials_expected']}  passed {summary['passed']}  "
        f"failed {summary['failed']}" + (f" ({summary['errors_failed']} of them errors)" if summary["errors_failed"] else "")
        + f"  errors {summary['errors']}" + (f"  tampering {summary['tampering']}" if summary.get("tampering") else ""),
        f"solved {summary['solved_tasks']}/{summary['tasks']} selected tasks ({rate(summary['solved_rate'])})  "
        f"pass@1 {rate(summary['pass_at_1'])} {base_note(summary)}  "
        + (f"pass@{k} {rate(summary['pass_at_k'])}  " if k > 1 else "")
        + f"tokens in/out {summary['tokens_in']}/{summary['tokens_out']}  cost {cost}"
        + (f"  cost/solved {usd(per_solved)}" if summary["solved_tasks"] else "")
        + (f"  ({basis})" if basis and summary["cost_usd"] is not None else ""),
    ]
    if not summary["complete"]:
        lines.append(f"incomplete: not every attempt has a verdict{incomplete_note(summary)}; "
                     f"rerun with the same --run-name to finish (--retry-errors reruns errors)")
    lines.append(f"results: {run_dir}")  # last, as the README says: the line a script takes with `tail -1`
    print("\n".join(lines), file=sys.stdout, flush=True)
