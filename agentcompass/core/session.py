"""A run's session: its lock, run.json (config, fingerprint, versions, the command as typed with secrets
redacted, one entry per session), log.jsonl and a periodic summary while its trials are scheduled; on
the way out its status (completed, stopped, failed, interrupted) and final summary. Opening it works out
which attempts are still pending (resume)."""

from __future__ import annotations

import platform
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

import structlog

from agentcompass.core.config import public_dict
from agentcompass.core.fingerprint import effective_settings
from agentcompass.core.lanes import Lane, RetryPolicy
from agentcompass.core.logs import RunLog, attributed_to
from agentcompass.core.registry import load
from agentcompass.core.secret_values import public_argv
from agentcompass.core.pacing import Pacer
from agentcompass.core.prepare import PreparedRun
from agentcompass.core.progress import run_prefix
from agentcompass.core.results import ResultsStore, TrialResult, now_iso, write_json
from agentcompass.core.run_dir import read_run_json
from agentcompass.core.run_summary import write_summary
from agentcompass.core.runlock import RunLock
from agentcompass.core.schema import ResolvedConfig
from agentcompass.core.trial import OpenSandboxes, TrialRunner

log = structlog.get_logger("agentcompass")
SUMMARY_EVERY_S = 10.0  # summary.json and the session's end in run.json are refreshed this often
VERSIONED = ("agentcompass", "hydra-core", "omegaconf", "pydantic", "docker", "swebench", "mini-swe-agent", "litellm")


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for dist in VERSIONED:
        try:
            found[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    from agentcompass.core.install import DISTRIBUTION  # ours, under the name it had before (core/install.py)

    try:
        found["agentcompass"] = metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        pass
    return found


@dataclass
class OpenRun:
    """A run whose session is open: its lane of the schedule, the trials done before, its summary once closed."""

    prepared: PreparedRun
    lane: Lane
    done: list[TrialResult]
    summary: dict[str, Any] = field(default_factory=dict)


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
        run_info.update(prepared.run_info)
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
        runner = (prepared.trial_runner or TrialRunner)(
            prepared.task_format, prepared.harness, prepared.provider, resolved.model,
            str(resolved.run.run_name), resolved.labels, OpenSandboxes(), resolved.run.keep_environment,
            pacer_for(resolved, prepared.provider, {} if pacers is None else pacers), gateway,
            resolved.run.kept_state_cap_mb,
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
                end_run = getattr(prepared.provider, "end_run", None)  # e.g. docker: the run's network goes
                if end_run is not None:
                    end_run(str(resolved.run.run_name))
                with attributed_to(run_dir):
                    log.info("run finished", status=status, **{k_: run.summary[k_] for k_ in ("passed", "failed", "errors")})


@contextmanager
def gateway_for(prepared: PreparedRun) -> Iterator[Any]:
    """The model gateway of a harness that uses one: started before the run writes anything (a port in
    use is the user's to fix), stopped when the run ends however it ends."""
    if not getattr(prepared.harness, "uses_gateway", False):
        yield None
        return
    with load("service", "gateway").for_run(prepared.resolved) as gateway:
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


def redact_argv(argv: list[str]) -> list[str]:
    """The command line as typed, every secret it holds masked (the API key, a header's or a URL's credential)."""
    return public_argv(argv)
