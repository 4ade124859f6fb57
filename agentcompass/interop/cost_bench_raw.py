"""A raw run folder of the Coding Agent Cost Benchmark (`runs/<id>`, as its run_deepswe.py writes it):
`manifest.csv` (one row per run: task, harness, model, run, status, start, end, outdir) and a folder
per run (`<setup>__<task>__run<n>`) with `output.log`, `reward.json`, `usage.json` and `model.patch`.

Read as the benchmark's own report reads it (benchmark_progress_report.py): a run passes when
reward.json says reward == 1; a self-hosted (opencode) run's model calls are its output.log's
step_start -> step_finish pairs (epoch milliseconds), its tokens usage.json's sessions (fresh input +
cache writes + cache reads); a Claude Code run's cost, tokens and turns come from the log's final
`result` event (a run killed before it has an unknown cost). The runs' own call times go into
model_calls.jsonl, so the report splits the endpoint's bill over who generated when, as the benchmark does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

from agentcompass.core.errors import UserError


def events(log: Path) -> Iterator[dict[str, Any]]:
    if not log.is_file():
        return
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            yield event


def opencode_calls(log: Path) -> list[dict[str, Any]]:
    calls, start = [], None
    for event in events(log):
        kind, stamp = event.get("type"), event.get("timestamp")
        if kind == "step_start":
            start = stamp
        elif kind == "step_finish" and start is not None and stamp is not None:
            tokens = (event.get("part") or {}).get("tokens") or {}
            calls.append({"start": start / 1000, "end": stamp / 1000, "duration_s": (stamp - start) / 1000, "status": "ok",
                          "tokens_in": int(tokens.get("input") or 0), "tokens_out": int(tokens.get("output") or 0),
                          "tokens_cached": 0, "cost_usd": None})
            start = None
    return calls


def usage_tokens(run: Path) -> tuple[int, int]:
    try:
        sessions = json.loads((run / "usage.json").read_text(encoding="utf-8")).get("sessions") or []
    except (OSError, ValueError, AttributeError):
        return 0, 0
    tokens_in = sum(int(s.get(k) or 0) for s in sessions for k in ("inputTokens", "cacheCreationTokens", "cacheReadTokens"))
    return tokens_in, sum(int(s.get("outputTokens") or 0) for s in sessions)


def claude_result(log: Path) -> dict[str, Any] | None:
    return next((e for e in events(log) if e.get("type") == "result"), None)


def passed(run: Path) -> bool:
    try:
        return json.loads((run / "reward.json").read_text(encoding="utf-8")).get("reward") == 1
    except (OSError, ValueError, AttributeError):
        return False


def raw_rows(folder: Path, manifest: list[dict[str, str]], infos: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows in per_run.csv's shape (plus `calls`) from each run folder of the manifest."""
    rows = []
    for entry in manifest:
        run = folder / entry["outdir"]
        if not (run / "reward.json").is_file():
            continue  # not finished: the benchmark's report leaves it out too
        setup, _, label = entry["outdir"].partition("__")
        task, _, number = label.rpartition("__")
        try:
            start, end = float(entry["start"]), float(entry["end"])
        except (KeyError, ValueError):
            raise UserError(f"import cost-bench: manifest.csv row {entry['outdir']}: start/end are not epoch seconds") from None
        row: dict[str, Any] = {"task": task, "setup": setup, "run": number, "passed": "1" if passed(run) else "0",
                               "start": start, "end": end, "session_s": end - start}
        if infos[setup].self_hosted:
            calls = opencode_calls(run / "output.log")
            tokens_in, tokens_out = usage_tokens(run)
            row.update(calls=calls, steps=len(calls), generation_s=sum(c["duration_s"] for c in calls),
                       tokens_in=tokens_in, tokens_out=tokens_out or sum(c["tokens_out"] for c in calls), billed_usd=0)
        else:
            result = claude_result(run / "output.log") or {}
            usage = result.get("usage") or {}
            row.update(steps=int(result.get("num_turns") or 0), generation_s=(result.get("duration_api_ms") or 0) / 1000,
                       tokens_in=sum(int(usage.get(k) or 0) for k in ("input_tokens", "cache_creation_input_tokens",
                                                                       "cache_read_input_tokens")),
                       tokens_out=int(usage.get("output_tokens") or 0), billed_usd=result.get("total_cost_usd"))
        rows.append(row)
    if not rows:
        raise UserError(f"import cost-bench: {folder} has no finished run (a folder with reward.json) and no per_run.csv")
    return rows
