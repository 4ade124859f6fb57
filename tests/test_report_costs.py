"""Issue 32's cost arithmetic: bills that must cover the run, every try priced, hosted costs
re-derived from tokens x prices, one bill group per endpoint, and --verify re-deriving all of it.
Results directories are written by hand (the report reads only files); every expected figure is
computed by hand in the comments."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from test_report import T0, iso, rows, trial, write_setup

GLM = {"name": "glm-5.2", "base_url": "http://127.0.0.1:9/v1", "pricing": {"billing": "self_hosted"}}
OPUS = "anthropic/claude-opus-4-5-20251101"  # litellm's map: $5 in, $25 out, $0.50 cache read, $6.25 cache write per M


def per_trial(out: Path) -> dict[tuple[str, str, str], dict[str, str]]:
    return {(r["setup"].split("__")[2], r["task_id"], r["attempt"]): r for r in csv.DictReader((out / "per_trial.csv").open())}


def write_calls(path: Path, calls: list[tuple[float, float]], **tokens) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "model_calls.jsonl").write_text("".join(
        json.dumps({"start": s, "end": e, "duration_s": e - s, "status": "ok", "tokens_in": 100, "tokens_out": 10,
                    "tokens_cached": 0, "cost_usd": None} | tokens) + "\n" for s, e in calls))


def one_line_exit_2(proc) -> None:
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr, proc.stderr


def glm_run(root: Path) -> Path:
    """One self-hosted setup: t1 generating [0,10] and [10,20], t2 [30,40] (seconds after T0, on an hour)."""
    write_setup(root, "demo__mini__glm__local", GLM, 1, [
        trial("t1", 1, "passed", [(T0, T0 + 10), (T0 + 10, T0 + 20)]), trial("t2", 1, "failed", [(T0 + 30, T0 + 40)])])
    return root


def test_a_bill_time_without_an_offset_is_refused_naming_the_row(cli, tmp_path):
    run = glm_run(tmp_path / "run")
    bill = tmp_path / "bill.csv"
    bill.write_text(f"interval_start,cost\n{iso(T0)},0.50\n2027-01-15T08:00:00,0.40\n")
    proc = cli("report", str(run), "--bill", str(bill))
    one_line_exit_2(proc)
    assert "row 2" in proc.stderr and "'2027-01-15T08:00:00' has no UTC offset" in proc.stderr
    assert not (run / "report").exists()


def test_a_bill_that_misses_part_of_the_run_makes_that_setup_unknown_never_zero(cli, tmp_path):
    # The bill has one 30 s interval [T0, T0+30) at $0.30: t1's 20 s are covered, t2's [30,40] is not.
    run = glm_run(tmp_path / "run")
    bill = tmp_path / "bill.json"
    bill.write_text(json.dumps([{"interval_start": T0, "interval_end": T0 + 30, "cost": "0.30"}]))
    proc = cli("report", str(run), "--bill", str(bill))
    assert proc.returncode == 0, proc.stderr
    assert "warning: glm-5.2@http://127.0.0.1:9/v1: 10.000 s of generation fall outside every interval" in proc.stderr
    out = run / "report"
    trials = per_trial(out)
    # Jobs' window inside [0,30): t1 runs [-1,21], t2 [29,41] -> 21 s + 1 s = 22 s: billed 0.30 x 22/30 = $0.22, all t1's.
    assert trials[("glm", "t1", "1")]["cost_usd"] == "0.220000"
    assert trials[("glm", "t2", "1")]["cost_usd"] == ""
    assert trials[("glm", "t2", "1")]["cost_basis"] == "unknown: 10.000 s of generation outside the bill"
    setup = rows(out / "summary.csv")["demo__mini__glm__local"]
    assert setup["total_cost_usd"] == "" and setup["cost_per_solved_usd"] == ""
    billing = json.loads((out / "billing.json").read_text())
    assert (billing["uncovered_s"], billing["groups"][0]["uncovered_setups"]) == (10.0, ["demo__mini__glm__local"])
    verified = cli("report", str(run), "--verify")
    assert verified.returncode == 1
    assert ("billing glm-5.2@http://127.0.0.1:9/v1: 10.0 s of generation outside every interval of the bill; "
            "the cost of demo__mini__glm__local is unknown") in verified.stderr


def test_a_bill_is_limited_to_the_jobs_window_then_split_as_the_benchmarks_rate_change_fixture():
    # verify_report.py's 1b fixture: hour 9 at $50/h, hour 10 at $100/h; jobs A 09:50-10:10,
    # B 09:55-10:05, C 09:59:30-10:00:30, D 10:00-10:20, each generating throughout its job.
    # Covered: 600 s of hour 9 ($50 x 600/3600 = $8.3333), 1200 s of hour 10 ($33.3333).
    # Its hand-computed split: A $13.0556, B $4.7222, C $0.3472, D $23.5417; total $41.6667.
    from decimal import Decimal

    from agentcompass.report.coverage import cover
    from agentcompass.report.split import Bucket, split_bill

    h9 = 946_717_200  # 2000-01-01T09:00:00Z
    jobs = {"A": (h9 + 3000, h9 + 4200), "B": (h9 + 3300, h9 + 3900), "C": (h9 + 3570, h9 + 3630), "D": (h9 + 3600, h9 + 4800)}
    covered = cover([Bucket(h9, h9 + 3600, Decimal(50)), Bucket(h9 + 3600, h9 + 7200, Decimal(100))], jobs.values())
    assert [(c.covered_s, c.billed) for c in covered] == [(600.0, Decimal("8.333333")), (1200.0, Decimal("33.333333"))]
    split = split_bill({k: [v] for k, v in jobs.items()}, [c.charged() for c in covered])
    assert {k: round(float(v), 4) for k, v in split.shares.items()} == {"A": 13.0556, "B": 4.7222, "C": 0.3472, "D": 23.5417}
    assert sum(split.shares.values()) == Decimal("41.666666") and split.unattributed_usd == 0


def test_retried_and_interrupted_tries_are_priced_and_verify_agrees(cli, tmp_path):
    # t1 attempt 1: try 1 met a 503 after generating [0,6] (kept in try-1/), try 2 generated [10,14].
    # trials.jsonl counts both tries' usage (10 s, 2 calls); its timings are the last try's.
    # t2 attempt 1 was interrupted after generating [20,23]: no line in trials.jsonl.
    # At $36/h ($0.01/s), each alone: t1 = 0.06 + 0.04 = $0.10 (0.06 of it a retry); interrupted $0.03.
    run = tmp_path / "run"
    record = trial("t1", 1, "passed", [(T0 + 10, T0 + 14)]) | {"retries": 1}
    record["usage"] |= {"model_calls": 2, "tokens_in": 200, "tokens_out": 20, "generation_s": 10.0}
    directory = write_setup(run, "demo__mini__glm__local", GLM, 1, [record])
    lines = [json.loads(line) for line in (directory / "trials.jsonl").read_text().splitlines()]
    lines[0] |= {"started_at": iso(T0 + 9), "finished_at": iso(T0 + 16)}  # as the scheduler writes it: the last try's start
    (directory / "trials.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    write_calls(directory / "tasks" / "t1" / "attempt-1" / "try-1", [(T0, T0 + 6)])
    write_calls(directory / "tasks" / "t2" / "attempt-1", [(T0 + 20, T0 + 23)])
    proc = cli("report", str(run), "--hourly-usd", "36")
    assert proc.returncode == 0, proc.stderr
    out = run / "report"
    t1 = per_trial(out)[("glm", "t1", "1")]
    assert (t1["cost_usd"], t1["retry_cost_usd"], t1["retries"]) == ("0.100000", "0.060000", "1")
    setup = rows(out / "summary.csv")["demo__mini__glm__local"]
    assert (setup["total_cost_usd"], setup["retry_cost_usd"], setup["interrupted_attempts"]) == ("0.130000", "0.090000", "1")
    assert setup["cost_per_solved_usd"] == "0.130000"
    verified = cli("report", str(run), "--verify")
    assert verified.returncode == 0, verified.stderr


def opus_trial(task: str, status: str, reported: float | None) -> dict:
    """One Claude-Code-like turn: 20,000 prompt tokens (2,000 fresh, 10,000 cache reads, 8,000 cache
    writes) and 1,000 out. Tokens x litellm's prices: 2,000 x 5 + 10,000 x 0.5 + 8,000 x 6.25 + 1,000 x 25
    per M = 0.010 + 0.005 + 0.050 + 0.025 = $0.09."""
    known = {"cost_usd": reported, "cost_known": True} if reported is not None else {"cost_usd": 0.0, "cost_known": False}
    return trial(task, 1, status, [(T0, T0 + 5)]) | {"usage": {
        "model_calls": 1, "tokens_in": 20_000, "tokens_out": 1_000, "tokens_cached": 10_000, "generation_s": 5.0, **known}}


def test_hosted_costs_are_tokens_times_prices_with_cache_reads_and_writes(cli, tmp_path):
    # t1: the harness priced cache writes as input (2,000 + 8,000 at $5/M): $0.08, 11.11 % below $0.09.
    # t2: the CLI's figure $0.0904 is 0.44 % off: kept beside ours, no difference shown.
    # t3: an opencode-like harness that knows no cost: priced all the same, as the model is in the map.
    run = tmp_path / "run"
    directory = write_setup(run, "demo__claude__opus__local", {"name": OPUS, "base_url": "http://127.0.0.1:9/proxy"}, 1, [
        opus_trial("t1", "passed", 0.08), opus_trial("t2", "passed", 0.0904), opus_trial("t3", "failed", None)])
    for task in ("t1", "t2", "t3"):
        write_calls(directory / "tasks" / task / "attempt-1", [(T0, T0 + 5)], tokens_in=20_000, tokens_out=1_000,
                    tokens_cached=10_000, tokens_cache_write=8_000)
    proc = cli("report", str(run))
    assert proc.returncode == 0, proc.stderr
    trials = per_trial(run / "report")
    assert [(trials[("opus", t, "1")]["cost_usd"], trials[("opus", t, "1")]["reported_cost_usd"],
             trials[("opus", t, "1")]["cost_difference_pct"]) for t in ("t1", "t2", "t3")] == [
        ("0.090000", "0.080000", "-11.11"), ("0.090000", "0.090400", ""), ("0.090000", "", "")]
    assert trials[("opus", "t3", "1")]["cost_basis"] == "per-token (litellm)"
    setup = rows(run / "report" / "summary.csv")["demo__claude__opus__local"]
    # A proxy's base_url does not make a hosted model self-hosted: no bill group, no hourly split.
    assert (setup["total_cost_usd"], setup["cost_basis"]) == ("0.270000", "per-token (litellm)")
    verified = cli("report", str(run), "--verify")
    assert verified.returncode == 1
    assert ("per_trial: demo__claude__opus__local/t1/1: trials.jsonl says $0.080000, tokens x prices give $0.090000 "
            "(-11.11 %)") in verified.stderr
    assert "/t2/1" not in verified.stderr and "/t3/1" not in verified.stderr


def test_each_endpoint_is_its_own_bill_group_with_its_own_rate(cli, tmp_path):
    # Endpoints A and B each serve one trial generating [0,10]. In one shared group they would share
    # every second; apart, A at $36/h costs $0.10 and B at $72/h $0.20.
    run = tmp_path / "run"
    write_setup(run, "demo__mini__glmA__local", GLM, 1, [trial("t1", 1, "passed", [(T0, T0 + 10)])])
    write_setup(run, "demo__mini__glmB__local", GLM | {"base_url": "http://127.0.0.2:9/v1"}, 1,
                [trial("t1", 1, "passed", [(T0, T0 + 10)])])
    bare = cli("report", str(run), "--hourly-usd", "36")
    one_line_exit_2(bare)
    assert "2 self-hosted endpoints (glm-5.2@http://127.0.0.1:9/v1, glm-5.2@http://127.0.0.2:9/v1)" in bare.stderr
    proc = cli("report", str(run), "--hourly-usd", "glm-5.2@http://127.0.0.1:9/v1=36",
               "--hourly-usd", "glm-5.2@http://127.0.0.2:9/v1=72")
    assert proc.returncode == 0, proc.stderr
    trials = per_trial(run / "report")
    assert (trials[("glmA", "t1", "1")]["cost_usd"], trials[("glmB", "t1", "1")]["cost_usd"]) == ("0.100000", "0.200000")
    groups = json.loads((run / "report" / "report.json").read_text())["pricing"]["groups"]
    assert [(g["endpoint"], g["hourly_usd"]) for g in groups] == [
        ("glm-5.2@http://127.0.0.1:9/v1", 36.0), ("glm-5.2@http://127.0.0.2:9/v1", 72.0)]
    assert cli("report", str(run), "--verify").returncode == 0


def test_verify_fails_on_model_calls_outside_their_trials_window(cli, tmp_path):
    run = glm_run(tmp_path / "run")
    assert cli("report", str(run), "--hourly-usd", "36").returncode == 0
    calls = run / "demo__mini__glm__local" / "tasks" / "t2" / "attempt-1" / "model_calls.jsonl"
    moved = [json.loads(line) for line in calls.read_text().splitlines()]
    calls.write_text("".join(json.dumps(c | {"start": c["start"] + 1000, "end": c["end"] + 1000}) + "\n" for c in moved))
    proc = cli("report", str(run), "--verify")
    assert proc.returncode == 1
    assert "demo__mini__glm__local/t2/attempt-1: 1 model call(s) outside the trial's window" in proc.stderr


def test_a_real_run_whose_first_try_met_503s_is_priced_whole_and_verifies(tmp_path):
    # mini-swe-agent against the scripted endpoint: the first try's model calls get 503s until the
    # try fails as infra (kept in try-1/), the second try solves the task. Every call took endpoint
    # time: at $36/h ($0.01/s) the attempt costs 0.01 x every call's seconds, try-1's being the retry.
    from conftest import run_cli
    from fake_llm_server import FakeLLM
    from mini_demo import FIX_COMMANDS, run_demo

    run_demo(FakeLLM(FIX_COMMANDS, failures=[503] * 6), tmp_path, "glm-5.2", "--max-retries", "3",
             "-m", "run.retry_backoff_s=0")
    run = tmp_path / "results" / "test"
    attempt = next(run.glob("*/tasks/fix-median-bug/attempt-1"))
    seconds = {part: sum(json.loads(line)["duration_s"] for line in (attempt / part / "model_calls.jsonl").read_text().splitlines())
               for part in ("try-1", ".")}
    assert seconds["try-1"] > 0
    proc = run_cli("report", str(run), "--hourly-usd", "36", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    [row] = csv.DictReader((run / "report" / "per_trial.csv").open())
    assert abs(float(row["cost_usd"]) - 0.01 * (seconds["try-1"] + seconds["."])) <= 2e-6
    assert abs(float(row["retry_cost_usd"]) - 0.01 * seconds["try-1"]) <= 2e-6
    verified = run_cli("report", str(run), "--verify", cwd=tmp_path)
    assert verified.returncode == 0, verified.stderr


def test_a_base_url_alone_is_not_self_hosted_but_naming_its_endpoint_bills_it_by_the_hour(cli, tmp_path):
    # An unpriced model on its own base_url, with no pricing.billing: per token, and no price -> unknown
    # (it used to be guessed self-hosted and take a share of the GPU bill). Naming its endpoint in
    # --hourly-usd says it is self-hosted: [0,10] alone at $36/h is $0.10.
    run = tmp_path / "run"
    write_setup(run, "demo__mini__mystery__local", {"name": "openai/mystery", "base_url": "http://127.0.0.3:9/v1"}, 1,
                [trial("t1", 1, "passed", [(T0, T0 + 10)], cost_known=False)])
    assert cli("report", str(run)).returncode == 0
    [row] = csv.DictReader((run / "report" / "per_trial.csv").open())
    assert (row["cost_usd"], row["cost_basis"]) == ("", "unknown: no price for the model")
    bare = cli("report", str(run), "--hourly-usd", "36")
    one_line_exit_2(bare)
    assert "no self-hosted setup among the results" in bare.stderr
    assert cli("report", str(run), "--hourly-usd", "openai/mystery=36").returncode == 0
    [row] = csv.DictReader((run / "report" / "per_trial.csv").open())
    assert (row["cost_usd"], row["cost_basis"]) == ("0.100000", "hourly split")
    assert cli("report", str(run), "--verify").returncode == 0


def test_an_attempt_interrupted_before_it_was_recorded_is_priced(tmp_path):
    # Ctrl-C while mini-swe-agent's first trial is mid-way: no line in trials.jsonl (a rerun runs the
    # attempt again), but its calls took endpoint time. glm-5.2's preset rate, $50.7/h, over their seconds.
    import os
    import signal
    import subprocess
    import sys
    import time

    from conftest import run_cli
    from fake_llm_server import FakeLLM, FakeLLMServer
    from mini_demo import FIX_COMMANDS, ONLY_TASK, isolated_env

    results = tmp_path / "results"
    with FakeLLMServer(FakeLLM(FIX_COMMANDS, delay_s=1.0)) as server:
        run = subprocess.Popen([sys.executable, "-m", "agentcompass", "run", "demo", "mini_swe_agent", "glm-5.2",
                                "--model-base-url", server.base_url, "--benchmark-params", ONLY_TASK,
                                "--results-dir", str(results), "--run-name", "cut"],
                               cwd=tmp_path, env=os.environ | isolated_env(tmp_path), stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while not any(p.read_text().strip() for p in results.glob("cut/*/tasks/*/attempt-1/model_calls.jsonl")):
            assert run.poll() is None and time.monotonic() < deadline, "the run ended before its first model call"
            time.sleep(0.1)
        run.send_signal(signal.SIGINT)
        assert run.wait(timeout=60) == 130, run.stderr.read()
    # The interrupted try is set aside under abandoned/ (docs/results.md), its calls with it.
    [calls] = [p for p in results.glob("cut/*/**/model_calls.jsonl")]
    seconds = sum(json.loads(line)["duration_s"] for line in calls.read_text().splitlines())
    proc = run_cli("report", str(results / "cut"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    [row] = csv.DictReader((results / "cut" / "report" / "summary.csv").open())
    assert row["interrupted_attempts"] == "1"
    assert abs(float(row["total_cost_usd"]) - 50.7 * seconds / 3600) <= 2e-6
    assert row["retry_cost_usd"] == row["total_cost_usd"]
    assert run_cli("report", str(results / "cut"), "--verify", cwd=tmp_path).returncode == 0


def test_a_trial_time_without_an_offset_is_refused(cli, tmp_path):
    run = glm_run(tmp_path / "run")
    path = run / "demo__mini__glm__local" / "trials.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    lines[1]["started_at"] = lines[1]["started_at"].removesuffix("+00:00")
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    proc = cli("report", str(run), "--hourly-usd", "36")
    one_line_exit_2(proc)
    assert "t2 attempt 1: started_at" in proc.stderr and "has no UTC offset" in proc.stderr


def test_bill_intervals_that_overlap_are_refused(cli, tmp_path):
    # A day row beside the hour rows of the same day would bill those hours twice.
    run = glm_run(tmp_path / "run")
    bill = tmp_path / "bill.json"
    bill.write_text(json.dumps([{"interval_start": T0, "cost": "0.50"},
                                {"interval_start": T0, "interval_end": T0 + 86400, "cost": "9.00"}]))
    proc = cli("report", str(run), "--bill", str(bill))
    one_line_exit_2(proc)
    assert "overlap" in proc.stderr and not (run / "report").exists()


def test_tiers_of_one_endpoint_with_different_preset_rates_need_the_rate_named(cli, tmp_path):
    run = tmp_path / "run"
    for tier, rate in (("none", 36), ("high", 72)):
        write_setup(run, f"demo__mini__glm__local__{tier}", GLM | {"pricing": {"hourly_usd": rate}, "reasoning": tier}, 1,
                    [trial("t1", 1, "passed", [(T0, T0 + 10)])])
    proc = cli("report", str(run))
    one_line_exit_2(proc)
    assert "carry different pricing.hourly_usd (36, 72)" in proc.stderr
    # Named: both tiers share [0,10] at $36/h ($0.10): $0.05 each.
    assert cli("report", str(run), "--hourly-usd", "glm-5.2=36").returncode == 0
    assert {r["cost_usd"] for r in per_trial(run / "report").values()} == {"0.050000"}


def test_a_long_prompt_is_priced_at_its_tier_per_request():
    # gemini-2.5-pro in litellm's map: $1.25/$10 per M in/out, $2.50/$15 for a prompt above 200k tokens.
    # 100k in + 1k out: 0.125 + 0.010 = 0.135; 300k in + 1k out: 0.750 + 0.015 = 0.765. Summed first
    # (400k in a trial's totals, sizes unknown) it is priced at base rates: 0.500 + 0.020 = 0.520.
    from decimal import Decimal

    import litellm

    from agentcompass.report.prices import Tokens, of_calls, prices_of

    prices = prices_of({"name": "gemini/gemini-2.5-pro"})
    calls = [{"status": "ok", "tokens_in": n, "tokens_out": 1000, "tokens_cached": 0} for n in (100_000, 300_000)]
    assert prices.cost(of_calls(calls)) == Decimal("0.900")
    assert prices.cost([Tokens(400_000, 2000, per_request=False)]) == Decimal("0.520")
    # litellm's own arithmetic for the long request agrees
    assert sum(litellm.cost_per_token(model="gemini/gemini-2.5-pro", prompt_tokens=300_000, completion_tokens=1000)) == \
        pytest.approx(0.765)
