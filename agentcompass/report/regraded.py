"""A regraded run beside its original (`agentcompass regrade`, docs/regrade.md): which verdicts flipped.

A regrade's run.json names the run it regrades (`regrade_of.run_dir`); its attempts are paired with the original's
by (task, attempt), and a pair whose verdict differs under the recipe's scoring rule (passed, failed, or no verdict)
is listed with both statuses and the regrade's message, which says why (the new verifier's output, a state that
could not be restored). Used by `report` and `view`; reads the results layout only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentcompass.core.results import TrialResult, read_trials
from agentcompass.core.scoring import Rule, rule_for, verdict

MESSAGE_CHARS = 200
NOT_REGRADABLE = "cannot regrade:"  # how a regrade records an attempt it could not grade (regrade/replay.py)


def regrade_of(run_dir: Path) -> dict[str, Any] | None:
    """run.json's `regrade_of` (the original run's folder, the verifier's source), or None for an ordinary run."""
    try:
        info = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    link = info.get("regrade_of") if isinstance(info, dict) else None
    return link if isinstance(link, dict) and link.get("run_dir") else None


def flips(original: dict[tuple[str, int], TrialResult], regraded: dict[tuple[str, int], TrialResult],
          rule: Rule) -> dict[str, Any]:
    """The attempts both runs recorded, those whose verdict changed, and those the regrade could not grade (each
    with why: no kept state, a state over the cap), sorted by task and attempt."""
    changed, unable = [], []
    both = sorted(set(original) & set(regraded))
    for key in both:
        was, now = original[key], regraded[key]
        if now.status == "error" and now.message.startswith(NOT_REGRADABLE):
            unable.append({"task_id": key[0], "attempt": key[1], "why": now.message[:MESSAGE_CHARS]})
        elif verdict(was, rule) != verdict(now, rule):
            changed.append({"task_id": key[0], "attempt": key[1], "was": was.status, "now": now.status,
                            "why": now.message[:MESSAGE_CHARS]})
    return {"compared": len(both) - len(unable), "flipped": changed, "not_regradable": unable,
            "not_regraded": len(set(original) - set(regraded))}


def pair_for(run_dir: Path, rule: Rule, loaded: dict[Path, dict[tuple[str, int], TrialResult]] | None = None
             ) -> dict[str, Any] | None:
    """The regrade in `run_dir` against its original (read from disk unless `loaded` has it); None when `run_dir`
    is no regrade or its original is gone."""
    link = regrade_of(run_dir)
    if link is None:
        return None
    source = Path(link["run_dir"])
    original = (loaded or {}).get(source.resolve()) if source.exists() else None
    if original is None:
        if not (source / "trials.jsonl").is_file():
            return {"original": str(source), "verifier_from": link.get("verifier_from"), "missing": True,
                    "compared": 0, "flipped": [], "not_regradable": [], "not_regraded": 0}
        original = read_trials(source / "trials.jsonl")[0]
    regraded = read_trials(run_dir / "trials.jsonl")[0] if (run_dir / "trials.jsonl").is_file() else {}
    return {"original": str(source), "verifier_from": link.get("verifier_from"), **flips(original, regraded, rule)}


def pair_of_run(run_dir: Path) -> dict[str, Any] | None:
    """`pair_for` under the run's own scoring rule (run.json's recipe and run settings): the viewer's run page."""
    try:
        config = json.loads((run_dir / "run.json").read_text(encoding="utf-8")).get("config") or {}
        rule = rule_for((config.get("benchmark") or {}).get("scoring"), (config.get("run") or {}).get("count_errors_as_failures"))
    except (OSError, ValueError, AttributeError, KeyError):
        return None
    return pair_for(run_dir, rule)


def regrade_pairs(setups: list[Any]) -> list[dict[str, Any]]:
    """For each loaded setup that regrades another run: the pair (report.json's `regrades`)."""
    loaded = {s.dir.resolve(): {(t.result.task_id, t.result.attempt): t.result for t in s.trials} for s in setups}
    out = []
    for setup in setups:
        pair = pair_for(setup.dir, setup.rule, loaded)
        if pair is not None:
            out.append({"setup": setup.name, **pair})
    return out


def pair_lines(pairs: list[dict[str, Any]]) -> list[str]:
    """The lines `report` prints: per regrade, how many verdicts flipped, then each flip."""
    lines = []
    for pair in pairs:
        if pair.get("missing"):
            lines.append(f"{pair['setup']}: regrades {pair['original']}, which is gone: no verdicts to compare")
            continue
        verifier = f" with the verifier from {pair['verifier_from']}" if pair.get("verifier_from") else ""
        lines.append(f"{pair['setup']}: regrade of {pair['original']}{verifier}: {len(pair['flipped'])} of "
                     f"{pair['compared']} verdicts flipped" + (f", {pair['not_regraded']} attempts not regraded yet"
                                                              if pair["not_regraded"] else ""))
        lines += [f"  {f['task_id']} attempt {f['attempt']}: {f['was']} -> {f['now']}" + (f" ({f['why']})" if f["why"] else "")
                  for f in pair["flipped"]]
        lines += [f"  {u['task_id']} attempt {u['attempt']}: not regraded: {u['why']}" for u in pair["not_regradable"]]
    return lines
