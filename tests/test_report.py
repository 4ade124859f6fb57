"""`agentcompass report` and `--verify` on results directories written by hand (the report reads
only files), and end to end on the demo. Every expected figure is computed by hand in comments."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from agentcompass.core.scoring import pass_at_k

T0 = 1_800_000_000  # on an hour boundary (500000 h)
ENDPOINT = {"name": "glm-5.2", "base_url": "http://127.0.0.1:9/v1", "pricing": {"billing": "self_hosted"}}


def trial(task: str, attempt: int, status: str, calls: list[tuple[float, float]] = (), **usage) -> dict:
    generation = sum(e - s for s, e in calls)
    return {"task_id": task, "attempt": attempt, "status": status, "calls": list(calls),
            "usage": {"model_calls": len(calls), "tokens_in": 100 * len(calls), "tokens_out": 10 * len(calls),
                      "generation_s": generation, **usage},
            "timings": {"agent": generation + 1, "total": generation + 2}}


def write_setup(root: Path, name: str, model: dict, k: int, trials: list[dict]) -> Path:
    """A results directory as `agentcompass run` writes it: run.json, trials.jsonl, model_calls.jsonl."""
    directory = root / name
    directory.mkdir(parents=True)
    labels = dict(zip(("benchmark", "harness", "model", "env"), name.split("__")))
    (directory / "run.json").write_text(json.dumps({"config": {"labels": labels, "model": model, "run": {"k": k}}}))
    lines = []
    for t in trials:
        start = min((s for s, _ in t["calls"]), default=T0)
        record = {k: v for k, v in t.items() if k != "calls"} | {
            "started_at": iso(start - 1), "finished_at": iso(start + t["timings"]["total"] - 1)}
        lines.append(json.dumps(record))
        if t["calls"]:
            calls_dir = directory / "tasks" / t["task_id"] / f"attempt-{t['attempt']}"
            calls_dir.mkdir(parents=True)
            (calls_dir / "model_calls.jsonl").write_text("".join(
                json.dumps({"start": s, "end": e, "duration_s": e - s, "status": "ok", "tokens_in": 100, "tokens_out": 10,
                            "tokens_cached": 0, "cost_usd": None}) + "\n" for s, e in t["calls"]))
    (directory / "trials.jsonl").write_text("\n".join(lines) + "\n")
    return directory


def iso(epoch: float) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="milliseconds")


@pytest.fixture
def sweep(tmp_path) -> Path:
    """Two tiers sharing one self-hosted endpoint, one hosted priced model, one unpriced model.

    none: t1/1 passed, generating [0,10] and [10,20]; t2/1 failed, no model call.
    high: t1/1 failed, generating [0,10]; t2/1 passed, generating [30,40].
    At $36/h ($0.01/s): [0,10] shared by none-t1 and high-t1 ($0.05 each), [10,20] none-t1 alone ($0.10),
    [30,40] high-t2 alone ($0.10). none: $0.15 total, 1 solved; high: $0.15, 1 solved.
    """
    run = tmp_path / "results" / "sweep"
    write_setup(run, "demo__mini__glm__local__none", {**ENDPOINT, "reasoning": "none"}, 1, [
        trial("t1", 1, "passed", [(T0, T0 + 10), (T0 + 10, T0 + 20)]), trial("t2", 1, "failed")])
    write_setup(run, "demo__mini__glm__local__high", {**ENDPOINT, "reasoning": "high"}, 1, [
        trial("t1", 1, "failed", [(T0, T0 + 10)]), trial("t2", 1, "passed", [(T0 + 30, T0 + 40)])])
    write_setup(run, "demo__mini__gpt__local", {"name": "openai/gpt-x", "pricing": {"input_per_mtok": 1.0}}, 1, [
        # $1 per million input tokens: 20,000 tokens are $0.02, 30,000 are $0.03 (as the harness recorded).
        trial("t1", 1, "passed", model_calls=1, cost_usd=0.02, tokens_in=20_000),
        trial("t2", 1, "passed", model_calls=3, cost_usd=0.03, tokens_in=30_000)])
    write_setup(run, "demo__mini__mystery__local", {"name": "openai/mystery"}, 1, [
        trial("t1", 1, "failed", model_calls=2, cost_usd=0.0, cost_known=False),
        trial("t2", 1, "failed", model_calls=1, cost_usd=0.0, cost_known=False)])
    return run


def rows(path: Path) -> dict[str, dict[str, str]]:
    return {r["setup"]: r for r in csv.DictReader(path.open())}


def trial_costs(path: Path) -> dict[tuple[str, str], str]:
    return {(r["setup"].removeprefix("demo__mini__"), r["task_id"]): r["cost_usd"] for r in csv.DictReader(path.open())}


def test_pass_at_k_against_hand_computed_values():
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - 3 / 6)  # 1 - C(3,2)/C(4,2)
    assert pass_at_k(5, 2, 3) == pytest.approx(1 - 1 / 10)  # 1 - C(3,3)/C(5,3)
    assert pass_at_k(3, 1, 1) == pytest.approx(1 / 3)
    assert pass_at_k(3, 0, 2) == 0.0
    assert pass_at_k(2, 1, 2) == 1.0  # n - c < k: every draw of 2 holds the pass


def test_pass_at_k_per_setup_in_the_report(cli, tmp_path):
    # k = 3. t1: 1 of 3 passed -> pass@1 1/3, pass@3 1. t2: 2 of 3 -> 2/3, 1. t3: 0 of 3 -> 0, 0.
    # pass@1 = (1/3 + 2/3 + 0) / 3 = 1/3; pass@3 = 2/3; solved 2 of 3.
    statuses = {"t1": "pff", "t2": "ppf", "t3": "fff"}
    trials = [trial(t, i + 1, "passed" if s == "p" else "failed") for t, ss in statuses.items() for i, s in enumerate(ss)]
    write_setup(tmp_path / "run", "demo__oracle__none__local", {"name": "none"}, 3, trials)
    assert cli("report", str(tmp_path / "run")).returncode == 0
    row = rows(tmp_path / "run" / "report" / "summary.csv")["demo__oracle__none__local"]
    assert float(row["pass_at_1"]) == pytest.approx(1 / 3, abs=1e-6)
    assert float(row["pass_at_k"]) == pytest.approx(2 / 3, abs=1e-6)
    assert (row["solved_tasks"], row["attempts"], row["tasks"]) == ("2", "9", "3")


def test_hourly_rate_split_by_concurrency_and_unknown_costs_stay_unknown(cli, sweep):
    proc = cli("report", str(sweep), "--hourly-usd", "36")
    assert proc.returncode == 0, proc.stderr
    out = sweep / "report"
    assert trial_costs(out / "per_trial.csv") == {
        ("glm__local__none", "t1"): "0.150000", ("glm__local__none", "t2"): "0.000000",
        ("glm__local__high", "t1"): "0.050000", ("glm__local__high", "t2"): "0.100000",
        ("gpt__local", "t1"): "0.020000", ("gpt__local", "t2"): "0.030000",
        ("mystery__local", "t1"): "", ("mystery__local", "t2"): "",  # the unpriced model: unknown, not 0
    }
    summary = rows(out / "summary.csv")
    none, high = summary["demo__mini__glm__local__none"], summary["demo__mini__glm__local__high"]
    assert (none["total_cost_usd"], none["cost_per_solved_usd"], none["avg_cost_per_attempt_usd"]) == (
        "0.150000", "0.150000", "0.075000")
    assert (high["total_cost_usd"], high["cost_per_passing_attempt_usd"]) == ("0.150000", "0.150000")
    gpt = summary["demo__mini__gpt__local"]
    assert (gpt["total_cost_usd"], gpt["cost_per_solved_usd"], gpt["cost_basis"]) == ("0.050000", "0.025000", "per-token (preset)")
    mystery = summary["demo__mini__mystery__local"]
    assert mystery["total_cost_usd"] == "" and mystery["cost_per_solved_usd"] == ""
    report = json.loads((out / "report.json").read_text())
    assert [s["total_cost_usd"] for s in report["setups"] if s["setup"] == "demo__mini__mystery__local"] == [None]
    assert report["pricing"]["estimate"] is True
    sole = {(r["setup"].removeprefix("demo__mini__"), r["task_id"]): r["sole_cost_usd"]
            for r in csv.DictReader((out / "per_trial.csv").open())}
    assert sole[("glm__local__none", "t1")] == "0.200000" and sole[("glm__local__high", "t1")] == "0.100000"
    page = (out / "report.html").read_text()
    assert "unknown" in page and "https://" not in page.split("<body>")[1].split("<script")[0]
    assert cli("report", str(sweep), "--verify").returncode == 0


def test_a_bill_is_split_by_concurrency_and_reconciles_to_the_cent(cli, sweep, tmp_path):
    # Hour 1 costs $0.50 + $0.40 (two rows of the endpoint's app), hour 2 $0.25 with no job in it.
    # Only the part of each hour inside the jobs' window is billed to the run. Jobs (start-1 to
    # start+generation+1): none-t1 [-1,21], none-t2 [-1,1], high-t1 [-1,11], high-t2 [29,41];
    # union inside hour 1: [0,21] + [29,41] = 33 s -> billed 0.90 x 33/3600 = $0.00825; hour 2: 0 s, $0.
    # Hour 1's generation union [0,20] + [30,40] = 30 s -> $0.000275/s. Seconds of share: [0,10] 5 s each
    # of none-t1 and high-t1, [10,20] 10 s none-t1, [30,40] 10 s high-t2.
    # none-t1 15 s = 0.004125; high-t1 5 s = 0.001375; high-t2 10 s = 0.00275. Outside the window: 1.15 - 0.00825.
    bill = tmp_path / "bill.csv"
    bill.write_text("Object ID,Description,Interval Start,Cost\n"
                    f"ap-1,glm-endpoint,{iso(T0)},0.50\nap-2,glm-endpoint,{iso(T0)},0.40\n"
                    f"ap-1,glm-endpoint,{iso(T0 + 3600)},0.25\n")
    proc = cli("report", str(sweep), "--bill", str(bill))
    assert proc.returncode == 0, proc.stderr
    out = sweep / "report"
    costs = trial_costs(out / "per_trial.csv")
    assert (costs[("glm__local__none", "t1")], costs[("glm__local__high", "t1")], costs[("glm__local__high", "t2")]) == (
        "0.004125", "0.001375", "0.002750")
    billing = json.loads((out / "billing.json").read_text())
    assert (billing["billed_usd"], billing["split_usd"], billing["unattributed_usd"]) == ("0.008250", "0.008250", "0.000000")
    [group] = billing["groups"]
    assert (group["bill_usd"], group["outside_window_usd"]) == ("1.150000", "1.141750")
    assert [(i["covered_s"], i["billed_usd"]) for i in group["intervals"]] == [(33.0, "0.008250"), (0.0, "0.000000")]
    assert json.loads((out / "report.json").read_text())["pricing"]["estimate"] is False
    verified = cli("report", str(sweep), "--verify")
    assert verified.returncode == 0, verified.stderr


def test_a_line_that_is_not_a_trial_is_skipped_with_a_warning(cli, sweep):
    path = sweep / "demo__mini__gpt__local" / "trials.jsonl"
    path.write_text(path.read_text() + "null\n")
    proc = cli("report", str(sweep), "--hourly-usd", "36")
    assert proc.returncode == 0, proc.stderr
    assert f"warning: {path}:3: not a trial" in proc.stderr
    assert rows(sweep / "report" / "summary.csv")["demo__mini__gpt__local"]["attempts"] == "2"


def test_bad_input_is_one_line_exit_2_and_nothing_written(cli, sweep, tmp_path):
    (tmp_path / "bad.json").write_text('[{"when": 1}]')
    for args in ([str(tmp_path / "nowhere")], [str(sweep), "--bill", str(tmp_path / "bad.json")],
                 [str(sweep), "--hourly-usd", "-1"], [str(sweep), "--hourly-usd", "2", "--bill", "x.csv"],
                 [str(sweep), "--verify"], [str(tmp_path)]):
        proc = cli("report", *args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert not (sweep / "report").exists()


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """`agentcompass run demo oracle none` and `... nop none` under one run name, then `report`."""
    from conftest import run_cli

    tmp = tmp_path_factory.mktemp("demo")
    for harness in ("oracle", "nop"):
        proc = run_cli("run", "demo", harness, "none", "--k", "2", "--run-name", "both", "--results-dir", str(tmp / "results"),
                       cwd=tmp)
        assert proc.returncode == 0, proc.stderr
    proc = run_cli("report", str(tmp / "results" / "both"), cwd=tmp)
    assert proc.returncode == 0, proc.stderr
    return tmp / "results" / "both"


def test_the_run_summary_shows_a_known_cost_per_solved_task(cli, tmp_path):
    proc = cli("run", "demo", "oracle", "none", "--run-name", "est", "--results-dir", str(tmp_path / "results"),
               "--benchmark-params", '{"limit": 1}', cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "cost/solved $0.0000" in proc.stdout and "unknown" not in proc.stdout  # no model: nothing spent, known


def test_demo_report_then_verify(cli, demo):
    summary = rows(demo / "report" / "summary.csv")
    oracle, nop = summary["demo__oracle__none__local"], summary["demo__nop__none__local"]
    assert (oracle["pass_at_1"], oracle["solved_tasks"], oracle["attempts"]) == ("1.0", "6", "12")
    assert (nop["pass_at_1"], nop["solved_tasks"], nop["total_cost_usd"]) == ("0.0", "0", "0.000000")
    assert nop["cost_per_solved_usd"] == ""  # nothing solved: no ratio
    proc = cli("report", str(demo), "--verify")
    assert proc.returncode == 0, proc.stderr
    assert "recomputes" in proc.stdout


def recording_browser(tmp_path: Path, exit_code: int = 0) -> tuple[Path, Path]:
    """A BROWSER command that appends the address it is given to a file, then exits with exit_code."""
    opened = tmp_path / "opened.txt"
    script = tmp_path / "browser.sh"
    script.write_text(f'#!/bin/sh\nprintf "%s\\n" "$1" >> "{opened}"\nexit {exit_code}\n')
    script.chmod(0o755)
    return script, opened


def test_open_shows_the_page_in_the_users_browser(cli, demo, tmp_path):
    browser, opened = recording_browser(tmp_path)
    proc = cli("report", str(demo), "--out", str(tmp_path / "out"), "--open", env={"BROWSER": str(browser)})
    assert proc.returncode == 0, proc.stderr
    assert opened.read_text().splitlines() == [(tmp_path / "out" / "report.html").resolve().as_uri()]


def test_open_without_a_browser_says_where_the_page_is(cli, demo, tmp_path):
    browser, opened = recording_browser(tmp_path, exit_code=1)
    # PATH holds no console browser and there is no display: the failing BROWSER is the only one there is.
    env = {"BROWSER": str(browser), "PATH": str(tmp_path), "DISPLAY": "", "WAYLAND_DISPLAY": ""}
    proc = cli("report", str(demo), "--out", str(tmp_path / "out"), "--open", env=env)
    assert proc.returncode == 0, proc.stderr
    assert opened.read_text().splitlines() == [(tmp_path / "out" / "report.html").resolve().as_uri()]
    assert f"--open: found no browser to open it; open {tmp_path / 'out' / 'report.html'} yourself" in proc.stderr


def copy_run(demo: Path, tmp_path: Path) -> Path:
    import shutil

    return Path(shutil.copytree(demo, tmp_path / "both"))


def test_a_tampered_per_trial_csv_fails_verify_naming_the_figure(cli, demo, tmp_path):
    run = copy_run(demo, tmp_path)
    path = run / "report" / "per_trial.csv"
    lines = path.read_text().splitlines()
    [index] = [i for i, line in enumerate(lines) if line.startswith("demo__oracle__none__local,fix-median-bug,1,")]
    lines[index] = lines[index].replace(",passed,", ",failed,")
    path.write_text("\n".join(lines) + "\n")
    proc = cli("report", str(run), "--verify")
    assert proc.returncode == 1
    assert "per_trial.csv: demo__oracle__none__local/fix-median-bug/1: status: expected 'passed', found 'failed'" in proc.stderr


def test_a_tampered_trials_jsonl_fails_verify_naming_the_figures(cli, demo, tmp_path):
    run = copy_run(demo, tmp_path)
    path = run / "demo__oracle__none__local" / "trials.jsonl"
    lines = path.read_text().splitlines()
    [index] = [i for i, line in enumerate(lines) if '"task_id":"fix-median-bug","attempt":1,' in line]
    lines[index] = lines[index].replace('"status":"passed"', '"status":"failed"')
    path.write_text("\n".join(lines) + "\n")
    proc = cli("report", str(run), "--verify")
    assert proc.returncode == 1
    assert "summary.csv: demo__oracle__none__local: pass_at_1: expected '0.916667', found '1.0'" in proc.stderr
    assert "summary.json: passed (recomputed from trials.jsonl): expected 11, found 12" in proc.stderr
