"""One run: load tasks, check everything, then schedule the trials and write the results."""

from __future__ import annotations

import json
import platform
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import structlog

from agentcompass.config import is_secret_override, public_dict
from agentcompass.errors import UserError
from agentcompass.formats.base import TaskFormat
from agentcompass.logs import RunLog
from agentcompass.progress import Progress
from agentcompass.registry import resolve
from agentcompass.results import ResultsStore, now_iso, summarize, write_json
from agentcompass.scheduler import Interrupted, RetryPolicy, Scheduler
from agentcompass.schema import ResolvedConfig
from agentcompass.task import Task
from agentcompass.trial import OpenSandboxes, TrialRunner

log = structlog.get_logger("agentcompass")
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


def prepare(resolved: ResolvedConfig, harness_name: str | None = None) -> PreparedRun:
    recipe = resolved.benchmark
    task_format = resolve("format", recipe.format)(recipe)
    tasks = task_format.load()
    env = resolved.env
    provider = resolve("provider", env.impl or env.name)(**resolved.settings_of(env), keep=resolved.run.keep_environment)
    for task in tasks:
        provider.check(task.sandbox_spec(task.id, {}, None))
    harness_cfg = resolved.harness
    harness_cls = resolve("harness", harness_name or harness_cfg.impl or harness_cfg.name)
    if getattr(harness_cls, "needs_model", False) and resolved.model.name == "none":
        raise UserError(f"harness '{harness_cfg.name}' needs a model; pass a preset (agentcompass list models) or a provider/model string")
    harness = harness_cls(**resolved.settings_of(harness_cfg))
    return PreparedRun(resolved, task_format, tasks, provider, harness, run_dir_of(resolved))


def execute(prepared: PreparedRun, argv: list[str]) -> dict[str, Any]:
    """Run (or resume) the trials; returns the summary. Raises Interrupted on Ctrl-C."""
    resolved, run_dir = prepared.resolved, prepared.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    store = ResultsStore(run_dir)
    finished = store.finished()
    k = resolved.run.k
    pending = [(t, a) for t in prepared.tasks for a in range(1, k + 1) if (t.id, a) not in finished]
    run_info = read_run_json(run_dir)
    run_info.update({
        "config": public_dict(resolved),
        "versions": versions(),
        "command": redact_argv(argv),
        "started_at": run_info.get("started_at") or now_iso(),
        "finished_at": None,
        "status": "running",
        "run_dir": str(run_dir),
    })
    if finished:
        run_info.setdefault("resumed_at", []).append(now_iso())
    write_json(run_dir / "run.json", run_info)
    task_ids = [t.id for t in prepared.tasks]
    selected = set(task_ids)
    done = [r for r in finished.values() if r.task_id in selected]
    sandboxes = OpenSandboxes()
    runner = TrialRunner(
        prepared.task_format, prepared.harness, prepared.provider, resolved.model,
        str(resolved.run.run_name), resolved.labels, sandboxes, resolved.run.keep_environment,
    )
    status = "completed"
    title = f"{resolved.labels['benchmark']} · {resolved.labels['harness']} · {resolved.labels['model']} · {resolved.labels['env']}"
    with RunLog(run_dir / "log.jsonl"):
        log.info("run started", run_dir=str(run_dir), pending=len(pending), finished=len(done))
        progress = Progress(len(task_ids) * k, done=len(done), passed=sum(r.status == "passed" for r in done),
                            errors=sum(r.status == "error" for r in done), title=title)
        scheduler = Scheduler(runner, store, resolved.run.task_concurrency,
                              RetryPolicy(resolved.run.max_retries, resolved.run.retry_backoff_s), progress)
        try:
            with progress:
                scheduler.run(pending)
        except Interrupted:
            status = "interrupted"
            raise
        except BaseException:  # a worker failed (RunFailed) or anything else: never "completed"
            status = "failed"
            raise
        finally:
            summary = write_summary(run_dir, task_ids, k, prepared.task_format)
            run_info.update({"finished_at": now_iso(), "status": status})
            write_json(run_dir / "run.json", run_info)
            log.info("run finished", status=status, **{k_: summary[k_] for k_ in ("passed", "failed", "errors")})
    return summary


def write_summary(run_dir: Path, task_ids: list[str], k: int, task_format: Any = None) -> dict[str, Any]:
    selected = set(task_ids)
    results = [r for r in ResultsStore(run_dir).finished().values() if r.task_id in selected]
    summary = summarize(results, task_ids, k)
    write_json(run_dir / "summary.json", summary)
    write_artifacts = getattr(task_format, "write_artifacts", None)
    if write_artifacts is not None:  # files a format derives from trials.jsonl, e.g. SWE-bench's predictions.jsonl
        write_artifacts(run_dir, results)
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
    cost = f"${summary['cost_usd']:.4f}" + ("" if summary.get("cost_known", True) else " (some models unpriced)")
    per_solved = summary.get("cost_per_solved_usd")
    lines = [
        f"results: {run_dir}",
        f"tasks {summary['tasks']}  trials {summary['trials']}  passed {summary['passed']}  "
        f"failed {summary['failed']}  errors {summary['errors']}",
        f"pass@1 {summary['pass_at_1']:.3f}  "
        + (f"pass@{summary['k']} {summary['pass_at_k']:.3f}  " if summary["k"] > 1 else "")
        + f"tokens in/out {summary['tokens_in']}/{summary['tokens_out']}  cost {cost}"
        + (f"  cost/solved ${per_solved:.4f}" if per_solved is not None else ""),
    ]
    print("\n".join(lines), file=sys.stdout, flush=True)
