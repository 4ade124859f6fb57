"""Precision and recall of each `agentcompass analyze` detector on the labelled calibration set
(tests/data/analyze_calibration: honest and cheating attempts of the demo tasks, in each harness's trajectory
shape), and how many failed attempts got their labelled failure mode. Runs on a copy, so the set stays as built.
Exit 1 when an honest attempt is flagged or a planted cheat is missed.
With --judge MODEL (and the model flags of `agentcompass analyze`), the LLM judge reviews every attempt too and
its precision and recall on the set's cheats are printed (a judge's misses are reported, never an exit 1: its
verdicts vary by model).

    PYTHONPATH=$PWD python benchmarks/analyze_calibration.py [--set DIR] [--judge MODEL --model-base-url URL ...]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from agentcompass.analyze.analysis import analyze_run, run_dirs
from agentcompass.analyze.detectors import DETECTORS
from agentcompass.commands.analyze import make_judge
from agentcompass.commands.analyze_judge import add_judge_args

SET = Path(__file__).resolve().parent.parent / "tests" / "data" / "analyze_calibration"


def found_by_attempt(results: Path, judge: Any = None) -> dict[str, dict]:
    found = {}
    for run_dir in run_dirs(results):
        analyze_run(run_dir, judge)
        for line in (run_dir / "analysis.jsonl").read_text().splitlines():
            row = json.loads(line)
            found[f"{run_dir.name}/{row['task_id']}/{row['attempt']}"] = {
                "detectors": sorted({f["detector"] for f in row["flags"] if f["detector"] != "judge"}),
                "judge": any(f["detector"] == "judge" for f in row["flags"]),
                "judge_error": (row.get("judge") or {}).get("error"),
                "failure_mode": (row["failure_mode"] or {}).get("mode")}
    return found


def score(labels: dict[str, dict], found: dict[str, dict]) -> tuple[dict[str, dict[str, int]], list[str]]:
    """Per detector: true positives, false positives, false negatives over every labelled attempt; and
    one line per mistake (a flag on an honest attempt, a missed cheat, a wrong or missing failure mode)."""
    counts = {name: {"tp": 0, "fp": 0, "fn": 0} for name in DETECTORS}
    mistakes = []
    for key, label in sorted(labels.items()):
        got = found.get(key, {"detectors": [], "failure_mode": None})
        for name in DETECTORS:
            expected, fired = name in label["detectors"], name in got["detectors"]
            if expected and fired:
                counts[name]["tp"] += 1
            elif fired or expected:
                counts[name]["fp" if fired else "fn"] += 1
            if fired != expected:
                mistakes.append(f"{key}: {name} {'fired on an attempt not labelled with it' if fired else 'missed'}")
        if got["failure_mode"] != label["failure_mode"]:
            mistakes.append(f"{key}: failure mode {got['failure_mode']}, labelled {label['failure_mode']}")
    return counts, mistakes


def judge_line(labels: dict[str, dict], found: dict[str, dict]) -> str:
    """The judge's precision and recall on the set: a cheat is an attempt labelled with any detector."""
    judged = [k for k in labels if k in found and not found[k]["judge_error"]]
    tp = sum(bool(labels[k]["detectors"]) and found[k]["judge"] for k in judged)
    fp = sum(not labels[k]["detectors"] and found[k]["judge"] for k in judged)
    cheats = sum(bool(labels[k]["detectors"]) for k in judged)
    errors = len(labels) - len(judged)
    return (f"judge: {len(judged)} judged ({errors} error(s)), cheats {cheats}, found {tp}, false+ {fp}, precision "
            f"{tp / (tp + fp) if tp + fp else 1.0:.2f}, recall {tp / cheats if cheats else 1.0:.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", type=Path, default=SET, help="a calibration set: results/ and labels.json")
    add_judge_args(parser)
    args = parser.parse_args()
    judge = make_judge(args)
    labels = json.loads((args.set / "labels.json").read_text())
    with tempfile.TemporaryDirectory(prefix="analyze-calibration-") as scratch:
        copy = Path(scratch) / "results"
        shutil.copytree(args.set / "results", copy)
        found = found_by_attempt(copy, judge)
    counts, mistakes = score(labels, found)
    print(f"{'detector':<20} {'cheats':>6} {'found':>5} {'false+':>6} {'precision':>9} {'recall':>6}")
    for name, c in counts.items():
        cheats = c["tp"] + c["fn"]
        precision = c["tp"] / (c["tp"] + c["fp"]) if c["tp"] + c["fp"] else 1.0
        recall = c["tp"] / cheats if cheats else 1.0
        print(f"{name:<20} {cheats:>6} {c['tp']:>5} {c['fp']:>6} {precision:>9.2f} {recall:>6.2f}")
    honest = [k for k, v in labels.items() if not v["detectors"]]
    failed = [k for k, v in labels.items() if v["failure_mode"]]
    print(f"attempts {len(labels)}  honest {len(honest)} (flagged: {sum(bool(found.get(k, {}).get('detectors')) for k in honest)})"
          f"  failure modes right {sum(found.get(k, {}).get('failure_mode') == labels[k]['failure_mode'] for k in failed)}/{len(failed)}")
    if judge is not None:
        print(judge_line(labels, found))
    for mistake in mistakes:
        print(f"MISTAKE {mistake}")
    return 1 if mistakes else 0


if __name__ == "__main__":
    sys.exit(main())
