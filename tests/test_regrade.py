"""`agentcompass regrade` on Harbor and local runs: graded again from their kept state with the same verifier (every
verdict identical) and a changed one (exactly the expected flips); a state over the cap; a regrade cut short
resumes; a kept state cannot take a write out of the fresh sandbox; pass^k against hand counts. The other formats
and the docker sources of a container's changes: tests/test_regrade_formats.py."""

from __future__ import annotations

import io
import json
import tarfile
import uuid
from pathlib import Path

import pytest

from harbor_factory import make_recipe, make_task

from agentcompass.core.results import TrialResult
from agentcompass.core.scoring import RULES, pass_at_k, pass_hat_k, summarize

# -- pass^k against hand-counted cases ------------------------------------------------------


def result(task: str, attempt: int, status: str) -> TrialResult:
    return TrialResult(task_id=task, attempt=attempt, status=status, started_at="2026-01-01T00:00:00.000+00:00",
                       finished_at="2026-01-01T00:00:01.000+00:00")


def test_pass_hat_k_is_the_chance_that_all_k_attempts_pass():
    assert pass_hat_k(3, 3, 3) == 1.0 and pass_hat_k(3, 2, 3) == 0.0
    assert pass_hat_k(4, 2, 2) == pytest.approx(1 / 6)  # 1 pair of 6 is both passing
    assert pass_hat_k(5, 3, 2) == pytest.approx(3 / 10)
    assert pass_hat_k(2, 1, 5) == 0.0 and pass_hat_k(2, 2, 5) == 1.0  # fewer attempts than k: k is n, as pass@k
    # a: 2 of 2 passed, b: 1 of 2, c: 0 of 2. pass^2 = (1 + 0 + 0) / 3; pass@2 = (1 + 1 + 0) / 3.
    rows = [result("a", 1, "passed"), result("a", 2, "passed"), result("b", 1, "passed"), result("b", 2, "failed"),
            result("c", 1, "failed"), result("c", 2, "failed")]
    summary = summarize(rows, ["a", "b", "c"], 2, RULES["errors_fail"])
    assert summary["pass_hat_k"] == pytest.approx(1 / 3, abs=1e-6)
    assert summary["pass_at_k"] == pytest.approx(2 / 3, abs=1e-6)
    assert pass_at_k(2, 1, 2) == 1.0


def test_an_agent_error_the_original_was_graded_after_decides_the_regrade_too(tmp_path):
    """A BadRequestError's reward never counts (Harbor's table): the regrade gets the same error back by name."""
    from agentcompass.core.errors import BadRequestError
    from agentcompass.core.task import AgentOutcome
    from agentcompass.regrade.replay import agent_error_of
    from agentcompass.regrade.source import Kept

    recorded = result("t", 1, "error").model_copy(update={"details": {"error_class": "BadRequestError"}})
    kept = Kept(tmp_path, AgentOutcome(exit_status="agent_error", message="400 from the model"), None, "", recorded)
    error = agent_error_of(kept)
    assert type(error) is BadRequestError and str(error) == "400 from the model" and not error.reward_counts
    verifier = recorded.model_copy(update={"details": {"error_class": "VerifierTimeoutError"}})
    assert agent_error_of(Kept(tmp_path, kept.outcome, None, "", verifier)) is None
    assert agent_error_of(Kept(tmp_path, AgentOutcome(exit_status="timeout"), None, "", recorded)) is None


def test_the_report_gives_pass_hat_k_with_its_interval(tmp_path):
    from agentcompass.report.reliability import add_reliability

    rows = [{"setup": "s", "pass_at_k": 2 / 3, "pass_hat_k": 1 / 3, "pass_at_k_tasks": 3},
            {"setup": "none", "pass_at_k": None, "pass_hat_k": None, "pass_at_k_tasks": 0}]
    add_reliability(rows)
    # Wilson at 1/3 over 3 tasks (z = 1.96): 0.0615 - 0.7923; at 2/3: 0.2077 - 0.9385 (worked by hand).
    assert rows[0]["pass_hat_k_low"] == pytest.approx(0.0615, abs=1e-3)
    assert rows[0]["pass_hat_k_high"] == pytest.approx(0.7923, abs=1e-3)
    assert rows[0]["pass_at_k_low"] == pytest.approx(0.2077, abs=1e-3)
    assert rows[1]["pass_hat_k_low"] is None and rows[1]["pass_at_k_high"] is None


# -- Harbor on docker -----------------------------------------------------------------------
HARBOR_IMAGE = "FROM {base}\nWORKDIR /app\nRUN echo old > /app/old.txt\n"
ANSWER_TEST = 'if [ "$(cat /app/answer.txt)" = {want} ] && [ ! -e /app/old.txt ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt'
HOOK = "/usr/lib/python3/dist-packages/sitecustomize.py"


def harbor_tasks(root: Path, base: str, flipped: bool) -> None:
    """The tasks, or (`flipped`) their changed verifiers: flip-down's now wants 8, flip-up's 8 too."""
    image = HARBOR_IMAGE.format(base=base)

    def task(name: str, answer: str, want: str, extra: str = "", agent_timeout: float = 60) -> None:
        make_task(root, name, solve=f"echo {answer} > /app/answer.txt; rm /app/old.txt; {extra}",
                  test=ANSWER_TEST.format(want=want), dockerfile=image, agent_timeout=agent_timeout)

    task("keep-pass", "42", "42")
    # It writes its own reward file: never read as the verdict, then or now.
    task("keep-fail", "41", "42", "mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt")
    task("flip-down", "7", "8" if flipped else "7")
    task("flip-up", "8", "8" if flipped else "7")
    # A right answer with a startup hook planted for the verifier's Python: failed, then and now (the restored
    # state is checked as the agent's changes are).
    task("planted", "42", "42", f"echo 'import os' > {HOOK}")
    task("big", "42", "42", "head -c 400000 /dev/urandom > /app/big.bin")
    # Its agent times out after its work: graded, the outcome's exit status carried into the regrade.
    task("slow", "42", "42", "sleep 30", agent_timeout=2)
    # A separate verifier (DeepSWE's way): graded on the collected artifacts in the verifier's own image.
    separate = make_task(root, "separate", solve="echo 7 > /app/answer.txt", dockerfile=image,
                         test=ANSWER_TEST.format(want="8" if flipped else "7"))
    toml = (separate / "task.toml").read_text().replace("[verifier]\ntimeout_sec = 60\n",
                                                         '[verifier]\ntimeout_sec = 60\nenvironment_mode = "separate"\n')
    (separate / "task.toml").write_text('artifacts = ["/app/answer.txt"]\n' + toml)
    (separate / "tests" / "Dockerfile").write_text(f"FROM {base}\nCOPY test.sh /tests/test.sh\n")


def statuses(run_dir: Path) -> dict[str, str]:
    return {r["task_id"]: r["status"] for r in map(json.loads, (run_dir / "trials.jsonl").read_text().splitlines())}


def rows_of(run_dir: Path) -> dict[str, dict]:
    return {r["task_id"]: r for r in map(json.loads, (run_dir / "trials.jsonl").read_text().splitlines())}


@pytest.fixture(scope="module")
def harbor_run(base_image, tmp_path_factory):
    """One finished oracle run of the Harbor tasks on docker, its state kept under a 0.1 MB cap."""
    from conftest import run_cli

    tmp = tmp_path_factory.mktemp("regrade-harbor")
    harbor_tasks(tmp / "tasks", base_image, flipped=False)
    harbor_tasks(tmp / "changed", base_image, flipped=True)
    for name in ("keep-pass", "keep-fail", "planted", "big", "slow"):  # the changed folder holds only what changed
        import shutil

        shutil.rmtree(tmp / "changed" / name)
    make_recipe(tmp / "conf", "rg", tmp / "tasks", runs_on_host=False)
    name = f"rg-{uuid.uuid4().hex[:6]}"
    done = run_cli("run", "rg", "oracle", "none", "--env", "docker", "--config-dir", str(tmp / "conf"),
                   "--results-dir", str(tmp / "res"), "--run-name", name, "--max-retries", "0",
                   "run.kept_state_cap_mb=0.1")
    assert done.returncode == 0, done.stderr
    return tmp, tmp / "res" / name / "rg__oracle__none__docker"


@pytest.mark.docker
def test_a_harbor_run_regraded_gives_the_same_verdicts_and_exactly_the_changed_verifiers_flips(cli, harbor_run):
    tmp, run_dir = harbor_run
    original = rows_of(run_dir)
    assert statuses(run_dir) == {"keep-pass": "passed", "keep-fail": "failed", "flip-down": "passed",
                                 "flip-up": "failed", "planted": "failed", "big": "passed", "slow": "passed",
                                 "separate": "passed"}
    assert original["planted"]["details"]["tampered"]
    kept = run_dir / "tasks" / "keep-pass" / "attempt-1" / "kept"
    with tarfile.open(kept / "changes.tar") as archive:  # the agent's layer: its file, its deletion as a whiteout
        names = archive.getnames()
    assert "app/answer.txt" in names and "app/.wh.old.txt" in names and not any(n.startswith("usr/bin") for n in names)
    # Over the cap: nothing kept, and the attempt says so with the size.
    big = original["big"]["details"]["kept_state"]
    assert big["kept"] is False and big["bytes"] >= 400000 and "run.kept_state_cap_mb" in big["reason"]
    assert not (run_dir / "tasks" / "big" / "attempt-1" / "kept" / "changes.tar").exists()

    same = cli("regrade", str(run_dir), "--run-name", "same")
    assert same.returncode == 0, same.stderr
    same_dir = tmp / "res" / "same" / run_dir.name
    regraded = rows_of(same_dir)
    assert {t: s for t, s in statuses(same_dir).items() if t != "big"} == \
        {t: s for t, s in statuses(run_dir).items() if t != "big"}
    assert regraded["planted"]["details"]["tampered"] == original["planted"]["details"]["tampered"]
    assert regraded["keep-fail"]["details"]["tampering"] == ["/logs/verifier/reward.txt"]
    assert regraded["slow"]["agent_exit_status"] == original["slow"]["agent_exit_status"] == "timeout"
    assert regraded["big"]["status"] == "error" and "cannot regrade" in regraded["big"]["message"]
    assert "exceed run.kept_state_cap_mb" in regraded["big"]["message"]
    link = json.loads((same_dir / "run.json").read_text())["regrade_of"]
    assert link == {"run_dir": str(run_dir.resolve()), "run_name": run_dir.parent.name, "verifier_from": None}

    changed = cli("regrade", str(run_dir), "--run-name", "changed", "--verifier-from", str(tmp / "changed"))
    assert changed.returncode == 0, changed.stderr
    changed_dir = tmp / "res" / "changed" / run_dir.name
    flips = {t: (statuses(run_dir)[t], s) for t, s in statuses(changed_dir).items() if s != statuses(run_dir)[t]}
    assert flips == {"flip-down": ("passed", "failed"), "flip-up": ("failed", "passed"), "separate": ("passed", "failed"),
                     "big": ("passed", "error")}

    report = cli("report", str(run_dir.parent), str(same_dir.parent), str(changed_dir.parent), "--out", str(tmp / "rep"))
    assert report.returncode == 0, report.stderr
    assert "0 of 7 verdicts flipped" in report.stdout, report.stdout
    assert "3 of 7 verdicts flipped" in report.stdout
    assert "flip-down attempt 1: passed -> failed" in report.stdout and "flip-up attempt 1: failed -> passed" in report.stdout
    assert "big attempt 1: not regraded: cannot regrade" in report.stdout
    pairs = json.loads((tmp / "rep" / "report.json").read_text())["regrades"]
    assert sorted((f["task_id"], f["now"]) for p in pairs for f in p["flipped"]) == [
        ("flip-down", "failed"), ("flip-up", "passed"), ("separate", "failed")]

    # The viewer's page of the regrade lists the same flips.
    from starlette.testclient import TestClient

    from agentcompass.view.app import make_app

    with TestClient(make_app([tmp / "res"]), base_url="http://127.0.0.1") as client:
        page = client.get("/run", params={"run": f"0/changed/{run_dir.name}"})
    assert page.status_code == 200 and "3 of 7 verdicts flipped" in page.text
    assert "flip-up attempt 1: failed &rarr; passed" in page.text


@pytest.mark.docker
def test_a_regrade_cut_short_resumes_where_it_stopped(cli, harbor_run):
    tmp, run_dir = harbor_run
    first = cli("regrade", str(run_dir), "--run-name", "cut", "--tasks", "keep-pass", "keep-fail", "flip-up")
    assert first.returncode == 0, first.stderr
    cut_dir = tmp / "res" / "cut" / run_dir.name
    lines = (cut_dir / "trials.jsonl").read_text().splitlines()
    (cut_dir / "trials.jsonl").write_text(lines[0] + "\n")  # killed after its first attempt was recorded
    again = cli("regrade", str(run_dir), "--run-name", "cut", "--tasks", "keep-pass", "keep-fail", "flip-up")
    assert again.returncode == 0, again.stderr
    assert "resuming: 1 of 3 trials done" in again.stderr
    resumed = (cut_dir / "trials.jsonl").read_text().splitlines()
    assert resumed[0] == lines[0] and len(resumed) == 3  # the recorded one kept as it was, the others graded
    assert statuses(cut_dir) == {"keep-pass": "passed", "keep-fail": "failed", "flip-up": "failed"}
    # Resumed with another verifier: refused, one line, exit 2 (two verifiers' verdicts never mix in one run).
    mixed = cli("regrade", str(run_dir), "--run-name", "cut", "--verifier-from", str(tmp / "changed"))
    assert mixed.returncode == 2 and mixed.stderr.count("\n") == 1 and "verifier from" in mixed.stderr


@pytest.mark.docker
def test_a_kept_state_never_writes_outside_the_fresh_sandbox(cli, harbor_run, tmp_path):
    """A forged archive (a link out, then a file through it; a whiteout with ..) lands in the container or nowhere."""
    tmp, run_dir = harbor_run
    forged_run = tmp / "res" / "forged" / run_dir.name
    import shutil

    shutil.copytree(run_dir, forged_run, symlinks=True)
    run_json = json.loads((forged_run / "run.json").read_text())
    run_json["config"]["run"]["run_name"] = "forged"
    (forged_run / "run.json").write_text(json.dumps(run_json))
    outside = tmp_path / "host-dir"
    outside.mkdir()
    (outside / "keep.txt").write_text("host file\n")
    archive = forged_run / "tasks" / "keep-pass" / "attempt-1" / "kept" / "changes.tar"
    with tarfile.open(archive, "w") as tar:
        link = tarfile.TarInfo("app/out")
        link.type, link.linkname = tarfile.SYMTYPE, str(outside)
        tar.addfile(link)
        data = b"42\n"
        for name in ("app/out/pwned", "app/answer.txt"):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        tar.addfile(tarfile.TarInfo("app/out/.wh.keep.txt"))
        tar.addfile(tarfile.TarInfo(f"app/../..{outside}/.wh.keep.txt"))
    done = cli("regrade", str(forged_run), "--run-name", "forged-again", "--tasks", "keep-pass")
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in outside.iterdir()) == ["keep.txt"]
    assert (outside / "keep.txt").read_text() == "host file\n"
    # The engine resolves the file's path inside the container, where the link leads nowhere: nothing restored,
    # and the attempt is an error saying so (never a verdict on half a state).
    row = rows_of(tmp / "res" / "forged-again" / run_dir.name)["keep-pass"]
    assert row["status"] == "error" and "cannot restore the kept state" in row["message"], row


def test_bad_regrade_input_is_one_line_and_exit_2(cli, tmp_path):
    missing = cli("regrade", str(tmp_path / "nope"))
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "not a run directory" in missing.stderr
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "run.json").write_text("{not json")
    broken = cli("regrade", str(tmp_path / "run"))
    assert broken.returncode == 2 and broken.stderr.count("\n") == 1 and "cannot be read" in broken.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # nothing written


# -- local: the workspace --------------------------------------------------------------------
def test_a_local_run_regraded_from_its_workspace_and_a_forged_one_never_reaches_the_host(cli, tmp_path):
    root, conf = tmp_path / "tasks", tmp_path / "conf"
    # An honest absolute link (as a venv's bin/python) is part of the work and comes back as a link.
    make_task(root, "lp", solve="echo 42 > /app/answer.txt; ln -s /etc /app/etclink",
              test='if [ "$(cat /app/answer.txt)" = 42 ] && [ -L /app/etclink ]; then echo 1; else echo 0; fi '
                   "> /logs/verifier/reward.txt")
    make_task(root, "lf", solve="echo 41 > /app/answer.txt",
              test='if [ "$(cat /app/answer.txt)" = 42 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt')
    make_recipe(conf, "rgl", root, runs_on_host=True)
    done = cli("run", "rgl", "oracle", "none", "--env", "local", "--config-dir", str(conf),
               "--results-dir", str(tmp_path / "res"), "--run-name", "r")
    assert done.returncode == 0, done.stderr
    run_dir = tmp_path / "res" / "r" / "rgl__oracle__none__local"
    again = cli("regrade", str(run_dir))
    assert again.returncode == 0, again.stderr
    assert statuses(tmp_path / "res" / "r-regrade" / run_dir.name) == statuses(run_dir) == {"lp": "passed", "lf": "failed"}

    outside = tmp_path / "host-dir"
    outside.mkdir()
    archive = run_dir / "tasks" / "lf" / "attempt-1" / "kept" / "changes.tar"
    with tarfile.open(archive, "w") as tar:
        link = tarfile.TarInfo("app/out")
        link.type, link.linkname = tarfile.SYMTYPE, str(outside)
        tar.addfile(link)
        info = tarfile.TarInfo("app/out/pwned")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"42\n"))
    forged = cli("regrade", str(run_dir), "--run-name", "forged", "--tasks", "lf")
    assert forged.returncode == 0, forged.stderr
    assert list(outside.iterdir()) == []
    row = rows_of(tmp_path / "res" / "forged" / run_dir.name)["lf"]
    assert row["status"] == "error" and "cannot restore the kept state" in row["message"], row
