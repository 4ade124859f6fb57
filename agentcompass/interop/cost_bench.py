"""The Coding Agent Cost Benchmark's published results folder (`per_run.csv`, `manifest.csv`, and
optionally `billing.json`, `summary.csv`) as one agentcompass results directory per setup.

What each file says is taken as it is: the setups and runs are the rows there are; a setup is
self-hosted when its manifest model names a Modal endpoint (`modal.../MODEL`, as the benchmark's
own billing pull decides), else hosted and priced at the cost its harness reported (`billed_usd`,
the study's `claude_code` basis); each attempt starts and ends at its recorded `start` and `end`.

The published folder keeps each run's generation time (`generation_s`) and call count (`steps`), not
the calls' own times (those are in the raw runs' output.log): the importer lays the `steps` calls back
to back at the start of the agent session (the session ends with the attempt), so the report splits
the endpoint's bill by concurrency over those intervals. Where a figure exceeds the one that holds it
(generation longer than the session, as parallel calls make it; a session longer than the attempt),
it is cut to fit, since a results directory nests generation inside the session inside the trial."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from agentcompass.core.errors import UserError
from agentcompass.core.results import write_atomic

PER_RUN_FIELDS = ("task", "setup", "run", "passed", "start", "end", "orchestration_s", "session_s", "generation_s",
                  "billed_usd", "steps", "tokens_in", "tokens_out")
SELF_HOSTED_PREFIX = "modal"  # the benchmark's manifest names a self-hosted endpoint's model modal[-tier]/MODEL
BENCHMARK = "deepswe"
HARNESS_NAMES = {"claude": "claude_code"}  # the benchmark's harness names -> ours (others are the same)
TIER_NAMES = {"nothink": "none"}  # its endpoint tiers (modal-TIER/...) -> our reasoning tiers


@dataclass
class SetupInfo:
    harness: str
    model: str  # as the manifest names it, e.g. modal-high/zai-org/GLM-5.2-FP8 or claude-code/claude-opus-4-8

    @property
    def self_hosted(self) -> bool:
        return self.model.split("/")[0].lower().startswith(SELF_HOSTED_PREFIX)

    @property
    def model_name(self) -> str:
        return self.model.split("/", 1)[1] if self.self_hosted and "/" in self.model else self.model

    @property
    def reasoning(self) -> str | None:
        tier = self.model.split("/")[0].partition("-")[2]
        return TIER_NAMES.get(tier, tier or "default") if self.self_hosted else None


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="milliseconds")


def read_csv(path: Path, needed: tuple[str, ...]) -> list[dict[str, str]]:
    try:
        rows = list(csv.DictReader(path.open(encoding="utf-8", newline="")))
    except OSError as exc:
        raise UserError(f"import cost-bench: cannot read {path} ({exc.strerror})") from None
    missing = [f for f in needed if rows and f not in rows[0]]
    if not rows or missing:
        raise UserError(f"import cost-bench: {path} " + (f"lacks the column(s) {', '.join(missing)}" if rows else "holds no rows")
                        + "; expected the benchmark's results folder (per_run.csv, manifest.csv)")
    return rows


def setups_of(manifest: list[dict[str, str]]) -> dict[str, SetupInfo]:
    """Setup name (the outdir's prefix) -> its harness and model, from manifest.csv."""
    setups: dict[str, SetupInfo] = {}
    for row in manifest:
        setup = (row.get("outdir") or "").split("__")[0]
        if setup and setup not in setups:
            harness = row.get("harness") or "unknown"
            setups[setup] = SetupInfo(HARNESS_NAMES.get(harness, harness), row.get("model") or setup)
    return setups


def calls(start: float, session: float, generation: float, steps: int, tokens_in: int, tokens_out: int) -> list[dict[str, Any]]:
    """`steps` calls of equal length, generation seconds in all, spread evenly over the session (each
    call followed by an equal share of the tool time), the tokens spread evenly (remainders on the last)."""
    spans = [(round(start + session * i / steps, 6), round(start + session * i / steps + generation / steps, 6))
             for i in range(steps)]
    return [{"start": spans[i][0], "end": spans[i][1], "duration_s": round(spans[i][1] - spans[i][0], 6), "status": "ok",
             "tokens_in": tokens_in // steps + (tokens_in % steps if i == steps - 1 else 0),
             "tokens_out": tokens_out // steps + (tokens_out % steps if i == steps - 1 else 0),
             "tokens_cached": 0, "cost_usd": None} for i in range(steps)]


def model_config(info: SetupInfo, endpoint: str, hourly_usd: float | None) -> dict[str, Any]:
    if not info.self_hosted:
        return {"name": info.model, "pricing": {"billing": "reported"}}  # the cost its harness reported
    pricing: dict[str, Any] = {"billing": "self_hosted"}
    if hourly_usd is not None:
        pricing["hourly_usd"] = hourly_usd
    return {"name": info.model_name, "base_url": endpoint, "reasoning": info.reasoning, "pricing": pricing}


def import_results(folder: Path, run_root: Path) -> list[Path]:
    """Write one results directory per setup of the folder under run_root; returns them. A published
    results folder has per_run.csv; a raw run folder (runs/<id>) has a folder per run instead."""
    manifest = read_csv(folder / "manifest.csv", ("model", "harness", "outdir"))
    if (folder / "per_run.csv").is_file() or not any((folder / r["outdir"]).is_dir() for r in manifest):
        per_run: list[dict[str, Any]] = read_csv(folder / "per_run.csv", PER_RUN_FIELDS)
    else:
        from agentcompass.interop.cost_bench_raw import raw_rows

        per_run = raw_rows(folder, manifest, setups_of(manifest))
    infos = setups_of(manifest)
    bill: dict[str, Any] = {}
    if (folder / "billing.json").is_file():
        try:
            bill = json.loads((folder / "billing.json").read_text(encoding="utf-8"))
        except ValueError as exc:
            raise UserError(f"import cost-bench: {folder / 'billing.json'} is not JSON ({exc})") from None
    endpoint = f"modal://{bill.get('app') or 'cost-bench-endpoint'}"  # one endpoint serves every self-hosted tier
    k = max(int(r["run"].removeprefix("run")) for r in per_run)
    tasks = sorted({r["task"] for r in per_run})
    written = []
    for setup in dict.fromkeys(r["setup"] for r in per_run):
        info = infos.get(setup)
        if info is None:
            raise UserError(f"import cost-bench: setup {setup!r} of per_run.csv is not in manifest.csv (outdir {setup}__...)")
        directory = run_root / f"{BENCHMARK}__{info.harness}__{setup}__modal"
        if directory.exists():
            raise UserError(f"import cost-bench: {directory} exists; pick another --run-name")
        written.append(write_setup(directory, setup, info, [r for r in per_run if r["setup"] == setup], k, len(tasks),
                                   model_config(info, endpoint, bill.get("effective_hourly"))))
    return written


def write_setup(directory: Path, setup: str, info: SetupInfo, rows: list[dict[str, Any]], k: int, tasks: int,
                model: dict[str, Any]) -> Path:
    directory.mkdir(parents=True)
    labels = {"benchmark": BENCHMARK, "harness": info.harness, "model": setup, "env": "modal"}
    lines = []
    for r in rows:
        start, end = float(r["start"]), float(r["end"])
        session = min(float(r["session_s"]), end - start)
        generation, steps = min(float(r["generation_s"]), session), int(r["steps"])
        attempt = int(r["run"].removeprefix("run"))
        reported = None if info.self_hosted or r["billed_usd"] in (None, "") else float(r["billed_usd"])
        usage: dict[str, Any] = {"model_calls": steps, "tokens_in": int(r["tokens_in"]), "tokens_out": int(r["tokens_out"]),
                                 "generation_s": generation, "cost_usd": reported or 0.0,
                                 "cost_known": info.self_hosted or reported is not None}
        lines.append(json.dumps({
            "task_id": r["task"], "attempt": attempt, "status": "passed" if r["passed"] == "1" else "failed",
            "usage": usage, "timings": {"agent": session, "total": end - start},
            "started_at": iso(start), "finished_at": iso(end)}))
        recorded = r.get("calls")  # a raw run's own call times (cost_bench_raw.py), else laid out evenly
        if info.self_hosted and (steps or recorded):
            attempt_dir = directory / "tasks" / r["task"] / f"attempt-{attempt}"
            attempt_dir.mkdir(parents=True)
            laid = recorded if recorded is not None else calls(end - session, session, generation, steps,
                                                               usage["tokens_in"], usage["tokens_out"])
            write_atomic(attempt_dir / "model_calls.jsonl", "".join(json.dumps(c) + "\n" for c in laid))
    write_atomic(directory / "run.json", json.dumps({"status": "completed", "imported_from": "coding-agent-cost-bench",
                                                      "config": {"labels": labels, "model": model, "run": {"k": k}}}, indent=2))
    write_atomic(directory / "summary.json", json.dumps({"trials_expected": tasks * k}))
    write_atomic(directory / "trials.jsonl", "\n".join(lines) + "\n")
    return directory
