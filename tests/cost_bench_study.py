"""The Coding Agent Cost Benchmark's published study deepswe33-glm-opus48 (33 DeepSWE tasks x 4 runs x
4 setups; data/cost-bench/, copied unchanged from the benchmark's results/) as agentcompass results
directories: a report over real figures at real sizes.

From per_run.csv: each run is an attempt (run1..run4, k = 4) with its status, times, steps and
tokens. Opus (Claude Code) is hosted: its cost is the study's billed_usd (with cache reads that make
tokens x prices give it). The GLM tiers (opencode)
are self-hosted: each attempt's `steps` model calls are laid back to back from the start of its
agent session, generation_s long in all, so the report splits the endpoint's cost by concurrency.
Where the study's generation_s exceeds session_s (parallel calls, 15 Opus runs) or its session_s
exceeds orchestration_s (3 GLM runs) it is cut to fit: our results nest generation inside the
session inside the trial.
"""

from __future__ import annotations

import csv
import json
from datetime import datetime, timezone
from pathlib import Path

STUDY = Path(__file__).parent / "data" / "cost-bench" / "deepswe33-glm-opus48"
GLM = {"name": "openai/zai-org/GLM-5.2-FP8", "base_url": "https://example-endpoint.invalid/v1",
       "pricing": {"hourly_usd": 56.0281, "billing": "self_hosted"}}  # the study's effective hourly rate
OPUS = {"input_per_mtok": 5.0, "output_per_mtok": 25.0, "cached_per_mtok": 0.5}  # USD per million tokens
SETUPS = {  # the study's setup: (directory name, harness, model)
    "opus": ("deepswe__claude_code__opus__modal", "claude_code", {"name": "anthropic/claude-opus-4-8", "pricing": OPUS}),
    "glm-default": ("deepswe__opencode__glm-default__modal", "opencode", {**GLM, "reasoning": "default"}),
    "glm-high": ("deepswe__opencode__glm-high__modal", "opencode", {**GLM, "reasoning": "high"}),
    "glm-nothink": ("deepswe__opencode__glm-nothink__modal", "opencode", {**GLM, "reasoning": "none"}),
}


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="milliseconds")


def per_run() -> list[dict[str, str]]:
    return list(csv.DictReader((STUDY / "per_run.csv").open(encoding="utf-8")))


def cached_tokens(tokens_in: int, tokens_out: int, billed_usd: float) -> int:
    """The study gives Opus's cost, not its cache reads: the cache reads that make tokens x prices
    that cost (to a few micro-dollars), so the report gives the study's cost however it prices."""
    fresh_price, read_price = OPUS["input_per_mtok"], OPUS["cached_per_mtok"]
    full = tokens_in * fresh_price + tokens_out * OPUS["output_per_mtok"]
    return min(tokens_in, max(0, round((full - billed_usd * 1e6) / (fresh_price - read_price))))


def calls(start: float, generation: float, steps: int, tokens_in: int, tokens_out: int) -> list[dict]:
    """`steps` calls back to back, generation_s in all, the tokens spread evenly (remainders on the last)."""
    out = []
    edges = [round(start + generation * i / steps, 6) for i in range(steps + 1)]
    for i in range(steps):
        last = i == steps - 1
        out.append({"start": edges[i], "end": edges[i + 1], "duration_s": round(edges[i + 1] - edges[i], 6), "status": "ok",
                    "tokens_in": tokens_in // steps + (tokens_in % steps if last else 0),
                    "tokens_out": tokens_out // steps + (tokens_out % steps if last else 0), "tokens_cached": 0,
                    "cost_usd": None})
    return out


def write_study(root: Path, drop: dict[str, int] | None = None, status: dict[str, str] | None = None) -> Path:
    """The four setups under root/<run name>; `drop` leaves a setup's last N attempts out and `status`
    sets a run's status, for incomplete runs."""
    run = root / "deepswe33"
    rows = per_run()
    for setup, (name, harness, model) in SETUPS.items():
        directory = run / name
        directory.mkdir(parents=True)
        mine = [r for r in rows if r["setup"] == setup]
        mine = mine[:len(mine) - (drop or {}).get(setup, 0)]
        labels = {"benchmark": "deepswe", "harness": harness, "model": setup, "env": "modal"}
        (directory / "run.json").write_text(json.dumps({"status": (status or {}).get(setup, "completed"), "config": {
            "labels": labels, "model": model, "run": {"k": 4}}}))
        (directory / "summary.json").write_text(json.dumps({"trials_expected": 132}))
        lines = []
        for r in mine:
            start, orchestration = float(r["start"]), float(r["orchestration_s"])
            session = min(float(r["session_s"]), orchestration)
            generation, steps = min(float(r["generation_s"]), session), int(r["steps"])
            attempt = int(r["run"].removeprefix("run"))
            hosted = setup == "opus"
            usage = {"model_calls": steps, "tokens_in": int(r["tokens_in"]), "tokens_out": int(r["tokens_out"]),
                     "generation_s": generation, "cost_usd": float(r["billed_usd"]) if hosted else 0.0}
            if hosted:
                usage["tokens_cached"] = cached_tokens(usage["tokens_in"], usage["tokens_out"], float(r["billed_usd"]))
            lines.append(json.dumps({
                "task_id": r["task"], "attempt": attempt, "status": "passed" if r["passed"] == "1" else "failed",
                "usage": usage, "timings": {"agent": session, "total": orchestration},
                "started_at": iso(start), "finished_at": iso(start + orchestration)}))
            if not hosted:
                calls_dir = directory / "tasks" / r["task"] / f"attempt-{attempt}"
                calls_dir.mkdir(parents=True)
                session_start = start + orchestration - session
                (calls_dir / "model_calls.jsonl").write_text("".join(
                    json.dumps(c) + "\n" for c in calls(session_start, generation, steps, usage["tokens_in"], usage["tokens_out"])))
        (directory / "trials.jsonl").write_text("\n".join(lines) + "\n")
    return run
