"""`agentcompass import cost-bench` on the benchmark's published study, then `report --bill its
billing.json --against its summary.csv`, all through the CLI as a user types it."""

from __future__ import annotations

import csv
import json
import shutil
from decimal import Decimal
from pathlib import Path

import pytest

from conftest import run_cli
from cost_bench_study import STUDY

GLM = ("glm-default", "glm-high", "glm-nothink")
DOLLARS = {"total_usd", "avg_usd_per_run", "usd_per_pass_run", "usd_per_task_solved", "total_sole_usd"}


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("imported")
    proc = run_cli("import", "cost-bench", str(STUDY), "--results-dir", str(root), "--run-name", "deepswe33")
    assert proc.returncode == 0, proc.stderr
    run = root / "deepswe33"
    proc = run_cli("report", str(run), "--bill", str(STUDY / "billing.json"))
    assert proc.returncode == 0, proc.stderr
    return run


def published() -> list[dict[str, str]]:
    return list(csv.DictReader((STUDY / "summary.csv").open()))


def differences(stderr: str) -> set[tuple[str, str]]:
    return {tuple(line.removeprefix("differs: ").split(":")[0].split(" ")[:2]) for line in stderr.splitlines()
            if line.startswith("differs: ")}


def test_the_import_keeps_each_runs_recorded_start_and_end_and_the_setups_the_files_name(imported):
    rows = {(r["setup"], r["task"], int(r["run"].removeprefix("run"))): r for r in csv.DictReader((STUDY / "per_run.csv").open())}
    dirs = sorted(p.name for p in imported.iterdir() if (p / "trials.jsonl").is_file())
    assert dirs == ["deepswe__claude_code__opus__modal", "deepswe__opencode__glm-default__modal",
                    "deepswe__opencode__glm-high__modal", "deepswe__opencode__glm-nothink__modal"]
    for directory in dirs:
        setup = directory.split("__")[2]
        model = json.loads((imported / directory / "run.json").read_text())["config"]["model"]
        # self-hosted as the manifest says (modal*/MODEL), hosted at its harness's reported cost otherwise
        assert model["pricing"]["billing"] == ("reported" if setup == "opus" else "self_hosted")
        trials = [json.loads(line) for line in (imported / directory / "trials.jsonl").read_text().splitlines()]
        assert len(trials) == 132
        for trial in trials:
            row = rows[(setup, trial["task_id"], trial["attempt"])]
            for ours, theirs in ((trial["started_at"], row["start"]), (trial["finished_at"], row["end"])):
                from datetime import datetime
                assert datetime.fromisoformat(ours).timestamp() == pytest.approx(float(theirs), abs=5e-4)


def test_the_cli_path_gives_every_count_rate_and_the_hosted_costs_to_the_cent_and_the_bill_in_full(imported):
    """Import, report with the study's own bill, compare: every figure agrees except the self-hosted
    setups' dollars, which the published folder cannot fix (it keeps each run's generation seconds,
    not its calls' times, and the split is by who generated when); their sum is the bill, to the cent."""
    proc = run_cli("report", str(imported), "--bill", str(STUDY / "billing.json"), "--against", str(STUDY / "summary.csv"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    found = differences(proc.stderr)
    assert found and all(setup in GLM and column in DOLLARS for setup, column in found), found
    report = json.loads((imported / "report" / "report.json").read_text())
    glm_total = sum(Decimal(r["total_cost_usd"]) for r in report["setups"] if r["harness"] == "opencode")
    assert abs(glm_total - sum(Decimal(r["total_usd"]) for r in published() if r["setup"] in GLM)) < Decimal("0.005")
    assert abs(glm_total - Decimal(str(json.loads((STUDY / "billing.json").read_text())["cost"]))) < Decimal("0.005")


def test_against_passes_on_the_published_figures_the_folder_fixes(imported, tmp_path):
    hosted = tmp_path / "summary.csv"
    with (STUDY / "summary.csv").open() as f:
        lines = f.read().splitlines()
    hosted.write_text("\n".join(line for line in lines if line.startswith(("setup,", "opus,"))) + "\n")
    proc = run_cli("report", str(imported), "--verify", "--against", str(hosted))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "every published figure agrees" in proc.stdout


def test_against_fails_on_a_planted_difference_naming_it(imported, tmp_path):
    rows = published()
    planted = tmp_path / "summary.csv"
    with planted.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        for row in rows:
            if row["setup"] == "opus":
                row = {**row, "pass_runs": "61", "total_usd": str(Decimal(row["total_usd"]) + Decimal("0.01"))}
            writer.writerow(row)
    proc = run_cli("report", str(imported), "--verify", "--against", str(planted))
    assert proc.returncode == 1
    assert {("opus", "pass_runs"), ("opus", "total_usd")} <= differences(proc.stderr)
    assert not any(setup == "opus" and column not in ("pass_runs", "total_usd") for setup, column in differences(proc.stderr))


@pytest.mark.parametrize("bill, field", [
    ({"by_hour": [{"hour": "2026-07-15T18:00:00+00:00"}]}, "by_hour[0].billed"),
    ({"app": "x", "by_hour": None}, "by_hour"),
    ({"by_hour": [{"hour": "2026-07-15T18:00:00", "hour_cost": 1.5}]}, "by_hour[0]"),
    ({"by_hour": [{"hour": "2026-07-15T18:00:00+00:00", "hour_cost": -2}]}, "by_hour[0].hour_cost"),
])
def test_a_malformed_billing_json_is_one_line_naming_the_field_and_writes_nothing(imported, tmp_path, bill, field):
    path = tmp_path / "billing.json"
    path.write_text(json.dumps(bill))
    out = tmp_path / "report"
    proc = run_cli("report", str(imported), "--bill", str(path), "--out", str(out))
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and field in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()


def test_import_of_a_folder_without_per_run_csv_is_one_line_and_writes_nothing(tmp_path):
    folder = tmp_path / "study"
    folder.mkdir()
    shutil.copy(STUDY / "manifest.csv", folder)
    proc = run_cli("import", "cost-bench", str(folder), "--results-dir", str(tmp_path / "results"), "--run-name", "x")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "per_run.csv" in proc.stderr
    assert not (tmp_path / "results").exists()


HOUR = 1784142000.0  # 2026-07-15T19:00:00Z, a whole hour


def raw_folder(root: Path) -> Path:
    """A runs/<id> folder in the benchmark's layout (run_deepswe.py): two GLM tiers sharing the endpoint
    in one hour, and one Claude Code run."""
    folder = root / "runs" / "20260715-190000"
    runs = [  # outdir, harness, model, start, end (s after HOUR), generation windows (s after HOUR), reward
        ("glm-default__t1__run1", "opencode", "modal/zai-org/GLM-5.2-FP8", 900, 2000, [(1000, 1600)], 1),
        ("glm-high__t1__run1", "opencode", "modal-high/zai-org/GLM-5.2-FP8", 1200, 2400, [(1300, 2200)], 0),
        ("opus__t1__run1", "claude", "claude-code/claude-opus-4-8", 900, 1500, [], 1),
    ]
    folder.mkdir(parents=True)
    lines = ["task,harness,model,prompt,run,status,start,end,duration_s,outdir"]
    for outdir, harness, model, start, end, windows, reward in runs:
        lines.append(f"t1,{harness},{model},v1,1,{'pass' if reward else 'fail'},{HOUR + start},{HOUR + end},{end - start},{outdir}")
        run = folder / outdir
        run.mkdir()
        (run / "reward.json").write_text(json.dumps({"reward": reward}))
        (run / "model.patch").write_text("")
        if harness == "opencode":
            log = []
            for a, b in windows:
                log.append({"type": "step_start", "timestamp": int((HOUR + a) * 1000)})
                log.append({"type": "step_finish", "timestamp": int((HOUR + b) * 1000), "part": {"tokens": {"input": 10, "output": 5}}})
            (run / "usage.json").write_text(json.dumps({"sessions": [{"inputTokens": 10, "outputTokens": 5}]}))
        else:
            log = [{"type": "assistant", "message": {"content": []}},
                   {"type": "result", "total_cost_usd": 1.25, "num_turns": 3, "duration_ms": 500000, "duration_api_ms": 400000,
                    "usage": {"input_tokens": 100, "cache_read_input_tokens": 900, "output_tokens": 50}}]
        (run / "output.log").write_text("".join(json.dumps(e) + "\n" for e in log))
    (folder / "manifest.csv").write_text("\n".join(lines) + "\n")
    return folder


def test_a_raw_run_folder_splits_the_bill_by_its_recorded_calls_to_the_cent(tmp_path):
    folder = raw_folder(tmp_path)
    bill = tmp_path / "billing.json"  # the hour costs $36; the jobs ran 900..2400 s of it: $15 billed
    bill.write_text(json.dumps({"app": "ep", "by_hour": [{"hour": "2026-07-15T19:00:00+00:00", "hour_cost": 36.0,
                                                          "glm_seconds_in_hour": 1500, "billed": 15.0}]}))
    # By hand: generation 1000..2200 s is 1200 s at $15/1200 s = $0.0125/s. glm-default alone 1000..1300 and
    # shared 1300..1600 (half each): 300 + 150 = 450 s = $5.625; glm-high 150 + 600 alone = 750 s = $9.375.
    summary = tmp_path / "summary.csv"
    summary.write_text("setup,runs,pass_runs,tasks_solved,tasks_total,total_usd,usd_per_task_solved\n"
                       "opus,1,1,1,1,1.25,1.25\nglm-default,1,1,1,1,5.625,5.625\nglm-high,1,0,0,1,9.375,\n")
    proc = run_cli("import", "cost-bench", str(folder), "--results-dir", str(tmp_path / "results"), "--run-name", "raw")
    assert proc.returncode == 0, proc.stderr
    proc = run_cli("report", str(tmp_path / "results" / "raw"), "--bill", str(bill), "--against", str(summary))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    planted = tmp_path / "planted.csv"
    planted.write_text(summary.read_text().replace("glm-high,1,0,0,1,9.375", "glm-high,1,0,0,1,9.385"))
    proc = run_cli("report", str(tmp_path / "results" / "raw"), "--verify", "--against", str(planted))
    assert proc.returncode == 1 and differences(proc.stderr) == {("glm-high", "total_usd")}, proc.stderr


@pytest.mark.parametrize(("study", "self_hosted"), [("deepswe33-opus5", ()), ("deepswe33-kimi-k3", ("k3", "k3-high", "k3-low"))])
def test_the_other_two_published_studies_come_in_through_the_cli(tmp_path, study, self_hosted):
    """The benchmark's Opus 5 study (hosted: every figure to the cent) and its Kimi K3 study (self-hosted, billed:
    every count and rate exact, the dollars split from the bill, which they add up to, to the cent)."""
    folder = STUDY.parent / study
    proc = run_cli("import", "cost-bench", str(folder), "--results-dir", str(tmp_path), "--run-name", study)
    assert proc.returncode == 0, proc.stderr
    bill = ["--bill", str(folder / "billing.json")] if (folder / "billing.json").is_file() else []
    proc = run_cli("report", str(tmp_path / study), *bill, "--against", str(folder / "summary.csv"))
    found = differences(proc.stderr)
    assert all(setup in self_hosted and column in DOLLARS for setup, column in found), found
    assert proc.returncode == (1 if found else 0), proc.stdout + proc.stderr
    if self_hosted:
        report = json.loads((tmp_path / study / "report" / "report.json").read_text())
        split = sum(Decimal(r["total_cost_usd"]) for r in report["setups"])
        assert abs(split - Decimal(str(json.loads((folder / "billing.json").read_text())["cost"]))) < Decimal("0.005")
