"""One run's grid: the last record of every (task, attempt) in trials.jsonl, as small rows.

trials.jsonl only grows (a run appends; a resume appends superseding lines), so the index keeps the
byte offset it has read up to and, when the file has grown, parses only the new lines. It is cached
beside the run (`.view-index.json`) so a 10,000-trial run opens without parsing every line again;
a cache that does not match the file (another size before our offset, an older format) is rebuilt.
A run dir the viewer cannot write keeps its index in memory only."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from agentcompass.core.results import write_atomic
from agentcompass.core.safe_files import contained

INDEX_FILE = ".view-index.json"
FORMAT = 1
MESSAGE_CHARS = 240


def row_of(trial: dict[str, Any]) -> dict[str, Any]:
    usage = trial.get("usage") or {}
    timings = trial.get("timings") or {}
    details = trial.get("details") or {}
    message = str(trial.get("message") or "").strip().splitlines()
    return {
        "task": str(trial.get("task_id")), "attempt": int(trial.get("attempt") or 0),
        "status": trial.get("status"), "category": trial.get("error_category"),
        "message": message[0][:MESSAGE_CHARS] if message else "",
        "reward": trial.get("reward"), "cost": usage.get("cost_usd"), "cost_known": usage.get("cost_known", True),
        "tokens_in": usage.get("tokens_in") or 0, "tokens_out": usage.get("tokens_out") or 0,
        "calls": usage.get("model_calls") or 0, "time": timings.get("total"), "retries": trial.get("retries") or 0,
        "exit": trial.get("agent_exit_status"),
        "tampered": bool(details.get("tampering") or details.get("tampered") or details.get("verifier_paths_touched")),
    }


class RunIndex:
    """The rows of one run, kept up to date with its trials.jsonl."""

    def __init__(self, run_dir: Path):
        self.run_dir = run_dir
        self.lock = threading.Lock()
        self.offset = 0
        self.rows: dict[str, dict[str, Any]] = {}
        self.load_cache()

    @property
    def trials_path(self) -> Path:
        return self.run_dir / "trials.jsonl"

    def trials_file(self) -> Path | None:
        """trials.jsonl, unless it is a link out of the run's folder (never followed)."""
        return contained(self.run_dir, self.trials_path)

    def load_cache(self) -> None:
        if contained(self.run_dir, self.run_dir / INDEX_FILE) is None or self.trials_file() is None:
            return
        try:
            cached = json.loads((self.run_dir / INDEX_FILE).read_text(encoding="utf-8"))
            size = os.stat(self.trials_path).st_size
        except (OSError, ValueError):
            return
        if cached.get("format") == FORMAT and 0 <= cached.get("offset", -1) <= size:
            self.offset, self.rows = cached["offset"], cached["rows"]

    def refresh(self) -> list[dict[str, Any]]:
        """The rows now, reading what was appended since the last call."""
        with self.lock:
            if self.trials_file() is None:
                return []
            try:
                size = os.stat(self.trials_path).st_size
            except OSError:
                return []
            if size < self.offset:  # replaced by a shorter file: start over
                self.offset, self.rows = 0, {}
            if size > self.offset:
                self.read_from(self.offset)
                self.save_cache()
            return list(self.rows.values())

    def read_from(self, offset: int) -> None:
        with open(self.trials_path, "rb") as f:
            f.seek(offset)
            data = f.read()
        end = data.rfind(b"\n") + 1  # a line still being written is read next time
        for line in data[:end].split(b"\n"):
            if not line.strip():
                continue
            try:
                trial = json.loads(line)
            except ValueError:
                continue
            if isinstance(trial, dict) and "task_id" in trial:
                row = row_of(trial)
                self.rows[f"{row['task']}\x00{row['attempt']}"] = row
        self.offset = offset + end

    def save_cache(self) -> None:
        try:
            write_atomic(self.run_dir / INDEX_FILE, json.dumps({"format": FORMAT, "offset": self.offset,
                                                                 "rows": self.rows}, separators=(",", ":")))
        except OSError:
            pass  # a read-only results dir: the index lives in memory only


class Indexes:
    """One RunIndex per run dir, made on first use."""

    def __init__(self) -> None:
        self.by_dir: dict[Path, RunIndex] = {}
        self.lock = threading.Lock()

    def rows(self, run_dir: Path) -> list[dict[str, Any]]:
        with self.lock:
            index = self.by_dir.get(run_dir) or self.by_dir.setdefault(run_dir, RunIndex(run_dir))
        return index.refresh()
