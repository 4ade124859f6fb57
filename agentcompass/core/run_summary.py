"""A run's summary: summary.json (and a format's derived files) from what trials.jsonl holds, and the
end-of-run lines printed from it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from agentcompass.core.results import ResultsStore, TrialResult, active_seconds, now_iso, write_json
from agentcompass.core.schema import ResolvedConfig
from agentcompass.core.scoring import base_note, incomplete_note, rate, rule_for, summarize, usd
from agentcompass.core.task import Usage

SOLE_COST = "sole-cost upper bound (self-hosted; agentcompass report splits it by concurrency)"


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
        + f"  errors {summary['errors']}" + (f"  tampering {summary['tampering']}" if summary.get("tampering") else "")
        + (f"  tampered {summary['tampered']} (failed)" if summary.get("tampered") else ""),
        f"solved {summary['solved_tasks']}/{summary['tasks']} selected tasks ({rate(summary['solved_rate'])})  "
        f"pass@1 {rate(summary['pass_at_1'])} {base_note(summary)}  "
        + (f"pass@{k} {rate(summary['pass_at_k'])}  pass^{k} {rate(summary.get('pass_hat_k'))}  " if k > 1 else "")
        + f"tokens in/out {summary['tokens_in']}/{summary['tokens_out']}  cost {cost}"
        + (f"  cost/solved {usd(per_solved)}" if summary["solved_tasks"] else "")
        + (f"  ({basis})" if basis and summary["cost_usd"] is not None else ""),
    ]
    if not summary["complete"]:
        lines.append(f"incomplete: not every attempt has a verdict{incomplete_note(summary)}; "
                     f"rerun with the same --run-name to finish (--retry-errors reruns errors)")
    lines.append(f"results: {run_dir}")  # last, as the README says: the line a script takes with `tail -1`
    print("\n".join(lines), file=sys.stdout, flush=True)
