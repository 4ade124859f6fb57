"""What the attempt, compare and solved-table pages show, gathered from one attempt's files."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from agentcompass.analyze.rescore import failure_name, flag_names, read_analysis
from agentcompass.core.safe_files import contained
from agentcompass.view.catalog import Catalog, RunRef, labels_of, read_json
from agentcompass.view.index import Indexes
from agentcompass.view.redact import redact
from agentcompass.view.trajectory import first_divergence, steps_of

PATCH_FILES = ("submission.diff", "patch.diff", "merged.diff", "agent1.patch", "agent2.patch")
VERIFIER_FILES = ("verifier.log", "eval.log")
INLINE_CHARS = 200_000
LISTED_FILES = 300


def read_text(directory: Path, name: str | Path, limit: int = INLINE_CHARS) -> str:
    """A file of the attempt, shown redacted and cut at `limit`; "" when it is not a file inside the attempt's
    folder (a link an agent left, `leak.patch -> /etc/shadow`, is never followed)."""
    path = contained(directory, directory / name)
    if path is None:
        return ""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read(limit + 1)
    except OSError:
        return ""
    return redact(text if len(text) <= limit else text[:limit] + "\n[... the rest is in the file]")


def diff_lines(text: str) -> list[tuple[str, str]]:
    """Each line of a unified diff with its kind, for colouring: file, hunk, add, del, context."""
    out = []
    for line in text.splitlines():
        if line.startswith(("diff --git", "+++ ", "--- ", "index ")):
            kind = "file"
        elif line.startswith("@@"):
            kind = "hunk"
        elif line.startswith("+"):
            kind = "add"
        elif line.startswith("-"):
            kind = "del"
        else:
            kind = "ctx"
        out.append((kind, line))
    return out


def attempt_files(directory: Path, under: str = "") -> list[str]:
    """The attempt's files (relative names, sorted), links that stay inside it included; no link is walked into."""
    top = directory / under
    if top.is_symlink():  # os.walk would start inside whatever it points at
        return []
    found = []
    for root, dirs, names in os.walk(top):  # and enters no linked folder below
        for name in names:
            path = Path(root, name)
            # A plain file met this way is inside; only a link needs resolving.
            if (path.is_file() and not path.is_symlink()) or contained(directory, path) is not None:
                found.append(path.relative_to(directory).as_posix())
    return sorted(found)


def patch_of(directory: Path) -> tuple[str, str] | None:
    candidates = list(PATCH_FILES) + [name for name in attempt_files(directory, "artifacts") if name.endswith(".patch")]
    for name in candidates:
        path = contained(directory, directory / name)
        if path is not None and path.stat().st_size:
            return name, read_text(directory, name)
    return None


def instruction_of(directory: Path) -> str:
    """The task as the agent saw it: the first user message of its trajectory, where one was kept."""
    for traj in sorted(directory.glob("*.traj.json")):
        if contained(directory, traj) is None:
            continue
        try:
            messages = json.loads(traj.read_text(encoding="utf-8")).get("messages") or []
        except (OSError, ValueError, AttributeError):
            continue
        for message in messages:
            if message.get("role") == "user":
                content = message.get("content")
                return redact(content if isinstance(content, str) else json.dumps(content))
    return ""


def redacted(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for item in steps:
        item["text"], item["reasoning"] = redact(item["text"]), redact(item["reasoning"])
        for act in item["actions"]:
            act["command"], act["output"] = redact(act["command"]), redact(act["output"])
    return steps


def attempt_page(run: RunRef, directory: Path, task: str, number: int) -> dict[str, Any]:
    info = read_json(run.path / "run.json")
    labels = labels_of(info)
    trial = read_json(directory / "result.json")
    steps = redacted(steps_of(directory, labels.get("harness")))
    patch = patch_of(directory)
    files = attempt_files(directory)[:LISTED_FILES]
    details = trial.get("details") or {}
    return {
        "run": {"id": run.id, "name": run.path.name, "labels": labels}, "task": task, "number": number, "trial": trial,
        "instruction": instruction_of(directory), "steps": steps,
        "patch": None if patch is None else {"file": patch[0], "lines": diff_lines(patch[1])},
        "verifier": [(name, read_text(directory, name)) for name in VERIFIER_FILES if contained(directory, directory / name)],
        "details": redact(json.dumps(details, indent=1, default=str)) if details else "",
        "tampered": bool(details.get("tampering") or details.get("tampered") or details.get("verifier_paths_touched")),
        "tampered_evidence": [redact(str(e)) for e in details.get("tampered") or []],
        "analysis": analysis_of(run.path, task, number),
        "agent_log": read_text(directory, "agent.log", 50_000),
        "files": files, "timings": trial.get("timings") or {}, "usage": trial.get("usage") or {},
    }


def analysis_of(run_dir: Path, task: str, number: int) -> dict[str, Any] | None:
    """The attempt's line of analysis.jsonl (`agentcompass analyze`), its evidence redacted; None: not analysed."""
    row = read_analysis(run_dir).get((task, number))
    if row is None:
        return None
    flags = [{k: redact(str(v)) for k, v in f.items()} for f in row.get("flags") or [] if isinstance(f, dict)]
    mode = row.get("failure_mode") if isinstance(row.get("failure_mode"), dict) else None
    return {"flags": flags, "failure_mode": None if mode is None else {k: redact(str(v)) for k, v in mode.items()}}


def with_analysis(rows: list[dict[str, Any]], run_dir: Path) -> list[dict[str, Any]]:
    """The grid's rows with each attempt's flags and failure mode, where the run was analysed (copies: the index's
    rows are cached as trials.jsonl gives them, and analysis.jsonl is rewritten whenever analyze runs again)."""
    analysis = read_analysis(run_dir)
    if not analysis:
        return rows
    out = []
    for row in rows:
        found = analysis.get((row["task"], row["attempt"]))
        out.append({**row, "flags": flag_names(found), "failure_mode": failure_name(found)} if found else row)
    return out


def setup_label(run: RunRef) -> str:
    labels = labels_of(read_json(run.path / "run.json"))
    parts = [labels.get("model"), labels.get("reasoning"), labels.get("harness"), sweep_settings(labels)]
    return " · ".join(str(p) for p in parts if p) or run.path.name


def sweep_settings(labels: dict[str, Any]) -> str:
    """What a sweep job set beyond the model, tier, harness and env (`run.k=2`): two jobs that differ only
    there would otherwise look the same. The tier is shown on its own already."""
    parts = [p for p in str(labels.get("suffix") or "").split(",") if p and not p.startswith("model.reasoning=")]
    return ",".join(parts)


def compare_context(runs: list[RunRef], task: str, catalog: Catalog) -> dict[str, Any]:
    """Each setup's attempts at one task; steps of the first attempts aligned, the first divergence marked."""
    columns = []
    for run in runs:
        task_dir = run.path / "tasks" / task
        listed = task_dir.glob("attempt-*") if task_dir.resolve().is_relative_to(run.path) else []
        attempts = sorted((int(p.name.removeprefix("attempt-")) for p in listed if p.name.removeprefix("attempt-").isdigit()))
        number = attempts[0] if attempts else None
        directory = catalog.attempt_dir(run, task, number) if number else None
        trial = read_json(directory / "result.json") if directory else {}
        steps = redacted(steps_of(directory, labels_of(read_json(run.path / "run.json")).get("harness"))) if directory else []
        columns.append({"run": run.id, "label": setup_label(run), "attempts": attempts, "number": number,
                        "status": trial.get("status"), "category": trial.get("error_category"),
                        "cost": (trial.get("usage") or {}).get("cost_usd"), "steps": steps})
    diverge = first_divergence(columns[0]["steps"], columns[1]["steps"]) if len(columns) >= 2 else None
    depth = max((len(c["steps"]) for c in columns), default=0)
    return {"task": task, "columns": columns, "diverge": diverge, "depth": depth}


def solved_table(runs: list[RunRef], indexes: Indexes) -> dict[str, Any]:
    """Per task, per setup: attempts passed of attempts recorded."""
    cells: dict[str, dict[str, tuple[int, int]]] = {}
    for run in runs:
        for row in indexes.rows(run.path):
            passed, total = cells.setdefault(row["task"], {}).get(run.id, (0, 0))
            cells[row["task"]][run.id] = (passed + (row["status"] == "passed"), total + 1)
    setups = [{"id": r.id, "label": setup_label(r)} for r in runs]
    return {"setups": setups, "tasks": sorted(cells), "cells": cells,
            "solved": {s["id"]: sum(1 for t in cells.values() if t.get(s["id"], (0, 0))[0]) for s in setups}}
