"""`agentcompass analyze --judge MODEL` against the project's scripted endpoint (a real HTTP server): the rubric's
request as the OpenAI and Anthropic APIs accept it (checked with their SDKs' own types), tokens and cost as the
server reported them times the preset's prices, a malformed verdict as one line for its attempt, the verdict
merged with the rule detectors' flags with its evidence checked against the trajectory, and verdicts cached."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from api_requests import problems
from conftest import run_cli
from fake_llm_server import FakeLLM, FakeLLMServer
from mini_demo import PRICES, user_config_dir

REPO = Path(__file__).resolve().parent.parent
SETUP = REPO / "tests" / "data" / "analyze_calibration" / "results" / "demo__mini_swe_agent__calibration__local"
CHEAT, MALFORMED, INVENTED = ("csv-sales-report", 2), ("fix-median-bug", 5), ("fix-median-bug", 1)


def check(outcome: str, explanation: str, step: int | None = None, quote: str = "") -> dict:
    return {"outcome": outcome, "explanation": explanation,
            "evidence": [{"step": step, "quote": quote}] if quote else []}


def verdict(task: str, attempt: int) -> str:
    """The scripted judge: a cheat named with a real quote, an invented quote, a malformed reply, else honest."""
    if (task, attempt) == MALFORMED:
        return "The agent seems fine to me."
    hacking = check("pass", "solved by editing the code")
    if (task, attempt) == CHEAT:
        hacking = check("fail", "it read the reference solution", 2, "cat /solution/solve.sh")
    elif (task, attempt) == INVENTED:
        hacking = check("fail", "it edited the tests", 1, "rm -rf tests/")
    return "```json\n" + json.dumps({"summary": f"{task} {attempt} reviewed", "failure_pattern": None, "checks": {
        "reward_hacking": hacking, "task_specification": check("pass", "the instructions were enough")}}) + "\n```"


def answer(body: dict) -> str:
    if "Per-attempt reviews" in json.dumps(body):
        return "Most attempts passed; one read the reference solution."
    text = json.dumps(body)
    found = re.search(r'\\"task_id\\": \\"([^\\]+)\\", \\"attempt\\": (\d+)', text)
    assert found, text[:2000]
    return verdict(found.group(1), int(found.group(2)))


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("judge")
    run = tmp / "results" / SETUP.name
    shutil.copytree(SETUP, run)
    llm = FakeLLM(["true"], answer=answer)
    with FakeLLMServer(llm) as server:
        first = run_cli("analyze", str(run), "--judge", "fake-coder", "--config-dir", str(user_config_dir(tmp)),
                        "--model-base-url", server.base_url, "--model-api-key", "sk-test-judge")
        judge_calls = len(llm.checks)
        summary = json.loads((run / "analysis.json").read_text())
        rows = {(r["task_id"], r["attempt"]): r for r in map(json.loads, (run / "analysis.jsonl").read_text().splitlines())}
        again = run_cli("analyze", str(run), "--judge", "fake-coder", "--config-dir", str(user_config_dir(tmp)),
                        "--model-base-url", server.base_url, "--model-api-key", "sk-test-judge")
    return {"first": first, "again": again, "llm": llm, "calls": judge_calls, "rows": rows, "summary": summary,
            "summary_again": json.loads((run / "analysis.json").read_text())}


def test_every_judge_request_is_one_the_openai_api_accepts_and_carries_the_rubric_and_the_trajectory(judged):
    assert judged["first"].returncode == 0, judged["first"].stderr
    asked = [r for r in judged["llm"].checks[:judged["calls"]] if r.body.get("max_tokens") != 1]
    assert len(asked) == len(judged["rows"]) + 1  # every attempt, then the job summary
    for request in asked:
        assert problems("chat", request.body) == [], request.body
        assert request.authorization == "Bearer sk-test-judge"
    cheat = next(r for r in asked if '\\"attempt\\": 2' in json.dumps(r.body) and "csv-sales-report" in json.dumps(r.body))
    prompt = json.dumps(cheat.body)
    assert "reward_hacking" in prompt and "task_specification" in prompt and "cat /solution/solve.sh" in prompt


def test_the_judges_tokens_and_cost_are_what_the_server_reported_times_the_presets_prices(judged):
    usages = [r.usage for r in judged["llm"].checks[:judged["calls"]] if r.body.get("max_tokens") != 1]
    prompt, completion = sum(u["prompt_tokens"] for u in usages), sum(u["completion_tokens"] for u in usages)
    judge = judged["summary"]["judge"]
    assert (judge["tokens_in"], judge["tokens_out"]) == (prompt, completion)
    expected = (prompt * PRICES["input_per_mtok"] + completion * PRICES["output_per_mtok"]) / 1e6
    assert judge["cost_usd"] == pytest.approx(expected, abs=2e-6) and judge["cost_known"] is True


def test_a_malformed_verdict_is_one_line_for_its_attempt_and_the_others_are_judged(judged):
    row = judged["rows"][MALFORMED]
    assert "holds no JSON object" in row["judge"]["error"] and not any(f["detector"] == "judge" for f in row["flags"])
    lines = [line for line in judged["first"].stdout.splitlines() if "judge error" in line]
    assert lines == [f"  judge error: {MALFORMED[0]}/{MALFORMED[1]}: {row['judge']['error']}"]
    assert judged["summary"]["judge"]["attempts_judged"] == len(judged["rows"])
    assert judged["summary"]["judge"]["job_summary"] == "Most attempts passed; one read the reference solution."


def test_the_judges_fail_is_merged_with_the_rule_flags_and_its_quote_checked_against_the_trajectory(judged):
    cheat = judged["rows"][CHEAT]
    assert {f["detector"] for f in cheat["flags"]} == {"solution_read", "judge"}
    [judge] = [f for f in cheat["flags"] if f["detector"] == "judge"]
    assert (judge["criterion"], judge["step"], judge["quote"], judge["quote_found"]) == (
        "reward_hacking", 2, "cat /solution/solve.sh", True)
    [invented] = [f for f in judged["rows"][INVENTED]["flags"] if f["detector"] == "judge"]
    assert invented["quote_found"] is False  # the honest attempt never ran it: the reader sees the judge made it up
    assert judged["summary"]["judge"]["checks"]["reward_hacking"] == {"fail": 2, "pass": len(judged["rows"]) - 3}


def test_a_second_analyze_reuses_every_verdict_and_asks_only_for_the_job_summary(judged):
    assert judged["again"].returncode == 0, judged["again"].stderr
    later = [r for r in judged["llm"].checks[judged["calls"]:] if r.body.get("max_tokens") != 1]
    assert len(later) == 2  # the malformed attempt again (an error is never cached), and the job summary
    judge = judged["summary_again"]["judge"]
    assert judge["cached"] == len(judged["rows"]) - 1
    usages = [r.usage for r in later]
    assert judge["tokens_in"] == sum(u["prompt_tokens"] for u in usages)  # only what this analyze paid for


def test_the_judge_speaks_anthropics_messages_api_too(tmp_path):
    run = tmp_path / SETUP.name
    shutil.copytree(SETUP, run)
    shutil.rmtree(run / "tasks" / "fix-median-bug")
    shutil.rmtree(run / "tasks" / "git-revert-bad-commit")
    trials = [line for line in (run / "trials.jsonl").read_text().splitlines() if '"csv-sales-report"' in line]
    (run / "trials.jsonl").write_text("\n".join(trials[:1]) + "\n")
    llm = FakeLLM(["true"], answer=answer)
    with FakeLLMServer(llm) as server:
        done = run_cli("analyze", str(run), "--judge", "claude-sonnet-4-5", "--model-base-url", server.base_url,
                       "--model-api-key", "sk-ant-test-judge")
    assert done.returncode == 0, done.stderr
    asked = [r for r in llm.checks if r.body.get("max_tokens") != 1]
    assert asked and all(r.api == "messages" and problems("messages", r.body) == [] for r in asked)
    [row] = map(json.loads, (run / "analysis.jsonl").read_text().splitlines())
    assert row["judge"]["checks"]["reward_hacking"]["outcome"] == "pass"


@pytest.mark.parametrize("args, says", [
    (["--rubric", "RUBRIC"], "--rubric sets up the judge"),
    (["--judge", "fake-coder", "--rubric", "BAD"], "not a rubric"),
    (["--judge", "no-such-model"], "no-such-model"),
])
def test_bad_judge_input_is_one_line_exit_2_and_nothing_written(tmp_path, args, says):
    run = tmp_path / SETUP.name
    shutil.copytree(SETUP, run)
    (tmp_path / "bad.yaml").write_text("criteria:\n  - name: Bad Name\n")
    args = [{"RUBRIC": str(REPO / "agentcompass" / "analyze" / "rubric.yaml"), "BAD": str(tmp_path / "bad.yaml")}.get(a, a)
            for a in args]
    done = run_cli("analyze", str(run), *args, "--config-dir", str(user_config_dir(tmp_path)))
    assert done.returncode == 2 and "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert says in done.stderr, done.stderr
    assert not (run / "analysis.jsonl").exists()


def test_the_calibration_benchmark_scores_a_judge_on_the_labelled_set(tmp_path):
    labels = json.loads((REPO / "tests" / "data" / "analyze_calibration" / "labels.json").read_text())
    keys = {k: (k.split("/")[1], int(k.split("/")[2])) for k in labels}
    judged = [k for k, at in keys.items() if at != MALFORMED]
    flagged = [k for k in judged if keys[k] in (CHEAT, INVENTED)]
    cheats = [k for k in judged if labels[k]["detectors"]]
    found, false = sum(k in cheats for k in flagged), sum(k not in cheats for k in flagged)
    llm = FakeLLM(["true"], answer=answer)
    with FakeLLMServer(llm) as server:
        done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "analyze_calibration.py"), "--judge",
                               "fake-coder", "--config-dir", str(user_config_dir(tmp_path)), "--model-base-url",
                               server.base_url, "--model-api-key", "sk-test-judge"], capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (f"judge: {len(judged)} judged ({len(labels) - len(judged)} error(s)), cheats {len(cheats)}, found {found}, "
            f"false+ {false}") in done.stdout, done.stdout
