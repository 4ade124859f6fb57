"""Read what a report needs from results directories, and nothing else: run.json,
trials.jsonl and each trial's model_calls.jsonl. The runner is never imported."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentcompass.calls import CALLS_FILE
from agentcompass.errors import UserError
from agentcompass.results import AbandonedTry, TrialResult, read_abandoned, read_jsonl, read_trials, unfinished_tail
from agentcompass.runlock import holder_of
from agentcompass.scoring import Rule, rule_for
from agentcompass.task import Usage


@dataclass
class Trial:
    setup: str
    result: TrialResult
    calls: list[dict[str, Any]] | None  # model_calls.jsonl, None when the trial has none

    @property
    def key(self) -> tuple[str, str, int]:
        return self.setup, self.result.task_id, self.result.attempt

    def intervals(self) -> list[tuple[float, float]] | None:
        """When this trial was generating; None when unknown (model time without call records)."""
        if self.calls is None:
            return [] if self.result.usage.generation_s == 0 else None
        return [(float(c["start"]), float(c["end"])) for c in self.calls]


@dataclass
class Setup:
    name: str  # the results directory's name, prefixed by its run name when two runs share it
    dir: Path
    labels: dict[str, str]
    model: dict[str, Any]
    k: int
    trials: list[Trial] = field(default_factory=list)
    task_ids: list[str] = field(default_factory=list)  # the run's selection (run.json), every rate's tasks
    status: str = "completed"  # run.json's; "running" only while a process holds the run (else "killed")
    holder: str | None = None  # the pid of the process running it now
    trials_expected: int | None = None  # summary.json's: tasks x k
    rule: Rule = field(default_factory=lambda: rule_for(None, None))
    abandoned: list["Unrecorded"] = field(default_factory=list)  # tries cut short: spend only, no verdict
    superseded: list[TrialResult] = field(default_factory=list)  # records a retry replaced: spend only

    def unrecorded_usage(self) -> Usage:
        """What tries without a record of their own spent: cut short, or superseded (their old record's)."""
        cut_short = [a.result.usage for a in self.abandoned if not a.superseded]
        return Usage.total([*cut_short, *(r.usage for r in self.superseded)])

    @property
    def hourly_usd(self) -> float | None:
        return (self.model.get("pricing") or {}).get("hourly_usd")

    @property
    def self_hosted(self) -> bool:
        """Billed by the hour: the preset says so, or an own endpoint with no per-token prices."""
        pricing = self.model.get("pricing") or {}
        per_token = pricing.get("input_per_mtok") is not None or pricing.get("output_per_mtok") is not None
        return pricing.get("hourly_usd") is not None or (bool(self.model.get("base_url")) and not per_token)


class Unrecorded(Trial):
    """An abandoned try: priced like a trial, keyed apart from the attempt's own record."""

    def __init__(self, setup: str, item: AbandonedTry) -> None:
        result = TrialResult(task_id=item.task_id, attempt=item.attempt, status="error", error_category="abandoned",
                             usage=item.usage, started_at="", finished_at="")
        super().__init__(setup, result, item.calls)
        self.name, self.superseded = item.name, item.superseded

    @property
    def key(self) -> tuple[str, str, int, str]:  # type: ignore[override]
        return self.setup, self.result.task_id, self.result.attempt, self.name


def run_dirs(paths: list[Path]) -> list[Path]:
    """Result directories (holding run.json and trials.jsonl) under each PATH: a run directory,
    a run name holding several (a sweep), or a results root."""
    found: list[Path] = []
    for path in paths:
        if not path.is_dir():
            raise UserError(f"{path} is not a directory; pass a run directory, a run name directory or a results root")
        here = [path] if (path / "run.json").is_file() else sorted(
            p.parent for pattern in ("*/run.json", "*/*/run.json") for p in path.glob(pattern))
        here = [p for p in here if (p / "trials.jsonl").is_file()]
        if not here:
            raise UserError(f"{path} holds no results (no run.json with trials.jsonl below it); "
                            "pass a run directory, a run name directory or a results root")
        found += [p for p in here if p.resolve() not in {f.resolve() for f in found}]
    return found


def load(paths: list[Path]) -> list[Setup]:
    dirs = run_dirs(paths)
    clashing = {d.name for d in dirs if sum(o.name == d.name for o in dirs) > 1}
    return [load_setup(d, f"{d.parent.name}/{d.name}" if d.name in clashing else d.name) for d in dirs]


def load_setup(directory: Path, name: str, warn: bool = True) -> Setup:
    try:
        info = json.loads((directory / "run.json").read_text(encoding="utf-8"))
        config = info["config"]
        setup = Setup(name, directory, dict(config.get("labels") or {}), dict(config.get("model") or {}),
                      int(config["run"]["k"]))
        setup.status = str(info.get("status") or "unknown")
        setup.rule = rule_for((config.get("benchmark") or {}).get("scoring"), config["run"].get("count_errors_as_failures"))
        selection = info.get("tasks")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UserError(f"{directory / 'run.json'} is unreadable ({type(exc).__name__}: {exc}); "
                        "pass a results directory written by agentcompass run") from None
    setup.holder = holder_of(directory)
    recorded_status = str(info.get("status") or "completed")
    setup.status = "killed" if recorded_status == "running" and setup.holder is None else recorded_status
    setup.trials_expected = expected_trials(directory)
    superseded: list[TrialResult] = []
    results, problems = read_trials(directory / "trials.jsonl", superseded)
    torn = unfinished_tail(directory / "trials.jsonl") if setup.holder is None else None  # else: a write in flight
    for problem in [*problems, *([torn] if torn else [])] if warn else ():
        print(f"warning: {problem}", file=sys.stderr, flush=True)
    for (task_id, attempt), result in sorted(results.items()):
        if attempt > setup.k:
            continue
        calls_path = directory / "tasks" / task_id / f"attempt-{attempt}" / CALLS_FILE
        setup.trials.append(Trial(name, result, read_jsonl(calls_path) if calls_path.is_file() else None))
    # A run written before run.json named its selection: the tasks its trials name (a lower bound).
    setup.task_ids = list(selection) if isinstance(selection, list) else sorted({t.result.task_id for t in setup.trials})
    chosen = set(setup.task_ids)
    setup.trials = [t for t in setup.trials if t.result.task_id in chosen]
    setup.abandoned = [Unrecorded(name, a) for a in read_abandoned(directory)
                       if a.task_id in chosen and a.attempt <= setup.k]
    setup.superseded = [r for r in superseded if r.task_id in chosen and r.attempt <= setup.k]
    return setup


def expected_trials(directory: Path) -> int | None:
    """How many trials the run was asked for, from its summary.json (None: no readable summary)."""
    try:
        value = json.loads((directory / "summary.json").read_text(encoding="utf-8")).get("trials_expected")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) else None


ENDINGS = {"killed": "was killed (run.json still says running)", "interrupted": "was interrupted",
           "stopped": "was stopped by an error no trial could get past", "failed": "failed"}


def unfinished_note(setup: Setup) -> str | None:
    """One line when a setup's run has not completed: still running, or ended before its last trial."""
    recorded = f"{len(setup.trials)}{f' of {setup.trials_expected}' if setup.trials_expected else ''} trials recorded"
    if setup.status == "running":
        return (f"{setup.name} is still running (process {setup.holder}): {recorded} so far; its figures will change, "
                f"make the report again once it ends")
    if setup.status == "completed":
        return None
    how = ENDINGS.get(setup.status, f"ended {setup.status}")
    return (f"{setup.name} {how}: {recorded}; resume it with the same --run-name to finish it, "
            f"then make the report again")
