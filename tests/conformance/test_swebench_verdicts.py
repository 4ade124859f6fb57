"""SWE-bench grading vs the official harness: the eval-log corpus through swebench 4.1.0's own
get_eval_report (classic rows) and 5.0.2's (5.x rows), and through agentcompass's grading; the eval
scripts both build; predictions files through both versions' readers and ours."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conformance.conftest import anchor_python, check_divergences, run_driver
from conformance.swebench_corpus import cases

from agentcompass.core.errors import UserError
from agentcompass.formats.swebench.grading import eval_report, test_spec as our_test_spec
from agentcompass.formats.swebench.data import instance_for_test_spec, normalize_row


@pytest.fixture(scope="module")
def classic_versions() -> dict[str, list[str]]:
    return run_driver(anchor_python("swebench 4.1.0"), "swebench_official.py", {"command": "versions"})


def our_grading(case: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    """What agentcompass's grade_log does with an eval log: the spec of the row, then its report."""
    row = normalize_row(case["row"])
    spec = our_test_spec(row, row.get("image") or "img")
    log = tmp_path / "eval.log"
    log.write_bytes(case["log"].encode())
    try:
        report = eval_report(spec, case["prediction"], log)
    except Exception as exc:
        return {"error": type(exc).__name__}
    return {"eval_script": spec.eval_script, "report": report}


def compare(anchor: str, corpus: list[dict[str, Any]], official: list[dict[str, Any]], tmp_path: Path,
            tally, allowed) -> None:
    key = anchor.replace(" ", "-")
    found: dict[str, list[str]] = {f"{key}/verdict": [], f"{key}/report": [], f"{key}/eval-script": []}
    same = 0
    for case, theirs in zip(corpus, official, strict=True):
        ours = our_grading(case, tmp_path)
        instance = case["prediction"]["instance_id"]
        verdict_theirs = theirs.get("error") or theirs["report"][instance]["resolved"]
        verdict_ours = ours.get("error") or ours["report"][instance]["resolved"]
        verdict_same = verdict_theirs == verdict_ours
        report_same = verdict_same and theirs.get("report") == ours.get("report")
        if "eval_script" in theirs and "eval_script" in ours and theirs["eval_script"] != ours["eval_script"]:
            found[f"{key}/eval-script"].append(case["id"])
        if not verdict_same:
            found[f"{key}/verdict"].append(f"{case['id']}: official {verdict_theirs}, ours {verdict_ours}")
        elif not report_same:
            found[f"{key}/report"].append(case["id"])
        same += verdict_same and report_same
    tally.record(anchor, "verdicts", same, len(corpus))
    check_divergences(found, allowed)


def test_classic_rows_graded_as_swebench_410(classic_versions, tmp_path, tally, allowed):
    """Classic rows (no eval_script): swebench 4.1.0's make_test_spec + get_eval_report vs ours."""
    corpus = cases(classic_versions, fivex=False)
    assert len(corpus) > 150
    official = run_driver(anchor_python("swebench 4.1.0"), "swebench_official.py", {"command": "grade", "cases": corpus})
    compare("swebench 4.1.0", corpus, official, tmp_path, tally, allowed)


def test_fivex_rows_graded_as_swebench_502(classic_versions, tmp_path, tally, allowed):
    """5.x rows (eval_script, log_parser, eval_type on the row): 5.0.2's own grading vs ours."""
    corpus = cases(classic_versions, fivex=True)
    for case in corpus:
        case["row"] = instance_for_test_spec(normalize_row(case["row"]), "sweb.eval.x86_64.case:latest")
    official = run_driver(anchor_python("swebench 5.0.2"), "swebench_official.py", {"command": "grade", "cases": corpus})
    compare("swebench 5.0.2", corpus, official, tmp_path, tally, allowed)


PATCH = "diff --git a/a.py b/a.py\n--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n-x = '\u2028'\n+y = '\u0085\x0c\x1c'\n"
PREDICTION_FILES = {
    "plain.jsonl": "".join(json.dumps({"instance_id": f"i{n}", "model_name_or_path": "m", "model_patch": PATCH}) + "\n"
                           for n in range(3)),
    "raw_separators.jsonl": json.dumps({"instance_id": "i1", "model_name_or_path": "m", "model_patch": PATCH},
                                       ensure_ascii=False) + "\n",
    "crlf.jsonl": json.dumps({"instance_id": "i1", "model_name_or_path": "m", "model_patch": "a\r\nb"}) + "\r\n",
    "no_final_newline.jsonl": json.dumps({"instance_id": "i1", "model_name_or_path": "m", "model_patch": ""}),
    "duplicate_ids.jsonl": "".join(json.dumps({"instance_id": "i1", "model_name_or_path": "m", "model_patch": p}) + "\n"
                                   for p in ("first", "second")),
    "null_patch.jsonl": json.dumps({"instance_id": "i1", "model_name_or_path": "m", "model_patch": None}) + "\n",
    "list.json": json.dumps([{"instance_id": "i1", "model_name_or_path": "m", "model_patch": PATCH}], ensure_ascii=False),
    "keyed.json": json.dumps({"i1": {"instance_id": "i1", "model_name_or_path": "m", "model_patch": PATCH}}),
    "blank_line.jsonl": json.dumps({"instance_id": "i1", "model_name_or_path": "m", "model_patch": ""}) + "\n\n",
    "keyed_without_ids.json": json.dumps({"i1": {"model_name_or_path": "m", "model_patch": ""}}),
    "not_json.jsonl": "{nope\n",
    "missing_id.jsonl": json.dumps({"model_name_or_path": "m", "model_patch": ""}) + "\n",
    "a_string.json": json.dumps("predictions"),
}


def our_read(path: Path) -> dict[str, Any]:
    from agentcompass.harnesses.predictions import read_predictions

    try:
        return {"predictions": read_predictions(path)}
    except UserError as exc:
        return {"error": str(exc)}


@pytest.mark.parametrize("anchor", ["swebench 4.1.0", "swebench 5.0.2"])
def test_predictions_files_read_as_swebench_reads_them(anchor, tmp_path, tally, allowed):
    """Every file the official reader reads, ours reads to the same predictions (keyed by instance_id, the
    last of a duplicate winning, as run_evaluation keys them); files it refuses we refuse, or read leniently
    where deliberate-differences.md says so."""
    paths = []
    for name, text in PREDICTION_FILES.items():
        (tmp_path / name).write_bytes(text.encode())
        paths.append(str(tmp_path / name))
    official = run_driver(anchor_python(anchor), "swebench_official.py", {"command": "read_predictions", "paths": paths})
    key = anchor.replace(" ", "-")
    found: dict[str, list[str]] = {f"{key}/predictions-differ": [], f"{key}/predictions-we-refuse": [],
                                   "predictions-lenient-reader": []}
    same = 0
    for path, theirs in zip(paths, official, strict=True):
        name, ours = Path(path).name, our_read(Path(path))
        if "error" in theirs:
            if "error" in ours:
                same += 1
            else:
                found["predictions-lenient-reader"].append(f"{name}: official {theirs['error']}")
        elif "error" in ours:
            found[f"{key}/predictions-we-refuse"].append(f"{name}: {ours['error']}")
        elif {p["instance_id"]: p for p in theirs["predictions"]} != ours["predictions"]:
            found[f"{key}/predictions-differ"].append(name)
        else:
            same += 1
    tally.record(anchor, "predictions files read", same, len(paths))
    check_divergences(found, allowed)
