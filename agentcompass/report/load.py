"""Read what a report needs from results directories, and nothing else: run.json,
trials.jsonl and each trial's model_calls.jsonl, with those of its failed tries (try-<n>/) and of
attempts interrupted before they were recorded. The runner is never imported."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentcompass.core.calls import CALLS_FILE
from agentcompass.core.errors import UserError
from agentcompass.report.bill import seconds
from agentcompass.core.results import AbandonedTry, TrialResult, read_abandoned, read_jsonl, read_trials, unfinished_tail
from agentcompass.core.runlock import holder_of
from agentcompass.core.scoring import Rule, rule_for
from agentcompass.core.secret_values import public_tree
from agentcompass.core.task import Usage


@dataclass
class Try:
    """The model calls of a try that did not give its attempt the result: one that met an infra
    error and was retried (try-<n>/), or an attempt interrupted before it was recorded."""

    label: str  # try-<n> | interrupted
    calls: list[dict[str, Any]]

    def intervals(self) -> list[tuple[float, float]]:
        return spans(self.calls)


@dataclass
class Trial:
    setup: str
    result: TrialResult
    calls: list[dict[str, Any]] | None  # model_calls.jsonl of the try that gave the result, None when absent
    tries: list[Try] = field(default_factory=list)  # the failed tries before it, in order

    @property
    def key(self) -> tuple[str, str, int]:
        return self.setup, self.result.task_id, self.result.attempt

    def intervals(self) -> list[tuple[float, float]] | None:
        """When the try that gave the result was generating; None when unknown (model time without call records)."""
        if self.calls is None:
            tried = sum(float(c.get("duration_s") or 0) for t in self.tries for c in t.calls)
            return [] if self.result.usage.generation_s - tried <= 0 else None
        return spans(self.calls)

    def all_calls(self) -> list[dict[str, Any]] | None:
        """Every call of the attempt, failed tries first; None when the last try's are unknown."""
        return None if self.calls is None else [c for t in self.tries for c in t.calls] + self.calls


def spans(calls: list[dict[str, Any]]) -> list[tuple[float, float]]:
    return [(float(c["start"]), float(c["end"])) for c in calls]


@dataclass
class Unrecorded:
    """An attempt directory with model calls and no line in trials.jsonl: interrupted (a rerun runs it
    again). Its endpoint time was spent all the same, so the report prices it with the retries."""

    setup: str
    task_id: str
    attempt: int
    tries: list[Try]
    label: str = "interrupted"  # an abandoned try's folder name under abandoned/<task_id>/

    @property
    def key(self) -> tuple[str, str, int, str]:
        return self.setup, self.task_id, self.attempt, self.label


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
    abandoned: list[AbandonedTry] = field(default_factory=list)  # tries cut short (abandoned/): spend only, no verdict
    superseded: list[TrialResult] = field(default_factory=list)  # records a retry replaced: spend only

    def unrecorded_usage(self) -> Usage:
        """What tries without a record of their own spent: cut short, or superseded (their old record's)."""
        cut_short = [a.usage for a in self.abandoned if not a.superseded]
        return Usage.total([*cut_short, *(r.usage for r in self.superseded)])
    unrecorded: list[Unrecorded] = field(default_factory=list)  # what the report prices of tries without a record
    billed_by_endpoint: bool = False  # named by `report --hourly-usd/--bill ENDPOINT=...`: self-hosted whatever the preset

    @property
    def hourly_usd(self) -> float | None:
        return (self.model.get("pricing") or {}).get("hourly_usd")

    @property
    def self_hosted(self) -> bool:
        """Billed by the hour of its own endpoint: `pricing.billing: self_hosted`, or (unset) an hourly
        rate in the preset. Never guessed from a base_url: a hosted model behind a proxy is per token."""
        if self.billed_by_endpoint:
            return True
        pricing = self.model.get("pricing") or {}
        billing = pricing.get("billing")
        return billing == "self_hosted" if billing is not None else pricing.get("hourly_usd") is not None

    @property
    def endpoint(self) -> str:
        """The bill group: one endpoint is one base URL serving one model, whatever the tiers."""
        return f"{self.model.get('name')}@{self.model.get('base_url') or ''}"


def run_dirs(paths: list[Path]) -> list[Path]:
    """Result directories (holding run.json and trials.jsonl) under each PATH: a run directory,
    a run name holding several (a sweep), or a results root."""
    found: list[Path] = []
    for path in paths:
        if not path.is_dir():
            raise UserError(f"{path} is not a directory; pass a run directory, a run name directory or a results root")
        here = [path] if (path / "run.json").is_file() else sorted(
            p.parent for pattern in ("*/run.json", "*/*/run.json") for p in path.glob(pattern))
        # trials.jsonl, or (a run interrupted before its first record) attempt directories to price
        here = [p for p in here if (p / "trials.jsonl").is_file() or (p / "tasks").is_dir()]
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
        model = public_tree(dict(config.get("model") or {}))  # a run.json of an older version may hold credentials
        setup = Setup(name, directory, dict(config.get("labels") or {}), model, int(config["run"]["k"]))
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
        check_times(directory, result)
        attempt_dir = directory / "tasks" / task_id / f"attempt-{attempt}"
        setup.trials.append(Trial(name, result, calls_in(attempt_dir), failed_tries(attempt_dir)))
    # A run written before run.json named its selection: the tasks its trials name (a lower bound).
    setup.task_ids = list(selection) if isinstance(selection, list) else sorted(
        {t.result.task_id for t in setup.trials} | {p.parent.name for p in directory.glob("tasks/*/attempt-*")})
    chosen = set(setup.task_ids)
    setup.trials = [t for t in setup.trials if t.result.task_id in chosen]
    setup.abandoned = [a for a in read_abandoned(directory) if a.task_id in chosen and a.attempt <= setup.k]
    setup.superseded = [r for r in superseded if r.task_id in chosen and r.attempt <= setup.k]
    # Tries cut short: those set aside in abandoned/, and an attempt dir a killed run left without a record
    # (moved to abandoned/ when the run resumes, so never both).
    setup.unrecorded = [Unrecorded(name, a.task_id, a.attempt, [Try(a.name, a.calls)], a.name)
                        for a in setup.abandoned if a.calls]
    for attempt_dir in sorted(directory.glob("tasks/*/attempt-*")):
        task_id, number = attempt_dir.parent.name, attempt_dir.name.removeprefix("attempt-")
        if not number.isdigit() or int(number) > setup.k or (task_id, int(number)) in results or task_id not in chosen:
            continue
        tries = failed_tries(attempt_dir) + [Try("interrupted", calls_in(attempt_dir) or [])]
        if any(t.calls for t in tries):
            setup.unrecorded.append(Unrecorded(name, task_id, int(number), tries))
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


def check_times(directory: Path, result: TrialResult) -> None:
    """A trial's window places it on the bill: a time without its UTC offset is refused, not guessed."""
    for name in ("started_at", "finished_at"):
        try:
            seconds(getattr(result, name))
        except ValueError as exc:
            raise UserError(f"{directory / 'trials.jsonl'}: {result.task_id} attempt {result.attempt}: {name} {exc}; "
                            "agentcompass run writes UTC times with +00:00") from None


def calls_in(directory: Path) -> list[dict[str, Any]] | None:
    path = directory / CALLS_FILE
    return read_jsonl(path) if path.is_file() else None


def failed_tries(attempt_dir: Path) -> list[Try]:
    """The calls of each try-<n>/ the scheduler kept, in try order."""
    numbered = [(int(p.name.removeprefix("try-")), p) for p in attempt_dir.glob("try-*") if p.name[4:].isdigit()]
    return [Try(path.name, calls_in(path) or []) for _, path in sorted(numbered)]
