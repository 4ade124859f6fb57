"""`agentcompass view` against what an agent (or a results folder) could plant: links out of an attempt's folder,
out of the run's, out of the served root; the headers every response carries; the refusals a user meets
(short token, busy port) as one line; Ctrl-C as a plain stop; sweep jobs told apart by their settings."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import sys
import subprocess
from pathlib import Path

import pytest

from conftest import run_cli
from test_view import Viewer, get, page  # noqa: F401 (page: a fixture)

SECRET = "other-run-secret-5d2c"  # held by a run outside the served root
HONEST_PATCH = "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a = 1\n+a = 2\n"


def oracle_run(results: Path, name: str, *extra: str) -> Path:
    done = run_cli("run", "demo", "oracle", "none", "--results-dir", str(results), "--run-name", name, *extra)
    assert done.returncode == 0, done.stderr
    return results / name


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> dict[str, Path]:
    """A served root with one demo run whose attempt folder holds links an agent (or anyone) planted, and a run
    outside the root whose files hold SECRET."""
    base = tmp_path_factory.mktemp("view-links")
    served, outside = base / "served", base / "outside"
    run_dir = next(oracle_run(served, "demo").glob("demo__*"))
    other = next(oracle_run(outside, "other").glob("demo__*"))
    other_attempt = other / "tasks" / "fix-median-bug" / "attempt-1"
    (other_attempt / "agent.log").write_text(f"{SECRET}\n")
    (other_attempt / "x.traj.json").write_text('{"messages": [{"role": "user", "content": "%s"}]}' % SECRET)
    attempt = run_dir / "tasks" / "fix-median-bug" / "attempt-1"
    (attempt / "artifacts").mkdir(exist_ok=True)
    (attempt / "leak.patch").symlink_to("/etc/shadow")
    (attempt / "patch.diff").symlink_to("/etc/shadow")
    (attempt / "artifacts" / "leak.patch").symlink_to("/etc/shadow")
    (attempt / "agent.log").unlink(missing_ok=True)
    (attempt / "agent.log").symlink_to(other_attempt / "agent.log")
    (attempt / "verifier.log").unlink(missing_ok=True)
    (attempt / "verifier.log").symlink_to(os.path.relpath(other_attempt / "agent.log", attempt))
    (attempt / "x.traj.json").symlink_to(other_attempt / "x.traj.json")
    (attempt / "model_calls.jsonl").symlink_to("/etc/passwd")
    # An attempt whose artifacts folder is a link into the other run: none of its patches is read or listed.
    (other_attempt / "stolen.patch").write_text(f"+{SECRET}\n")
    linked = run_dir / "tasks" / "fix-backup-script" / "attempt-1"
    (linked / "artifacts").symlink_to(other_attempt)
    # An attempt the runner failed for a planted link: the page says so, with the evidence.
    tampered = run_dir / "tasks" / "git-revert-bad-commit" / "attempt-1" / "result.json"
    record = json.loads(tampered.read_text())
    record.update(status="failed", message="tampered: /logs/artifacts/x: a link to /etc/shadow",
                  details={"tampered": ["/logs/artifacts/x: a link to /etc/shadow, out of the copied tree"]})
    tampered.write_text(json.dumps(record))
    # An honest attempt beside it: a real patch, and a link to it inside the attempt (as an agent's artifact may be).
    honest = run_dir / "tasks" / "csv-sales-report" / "attempt-1"
    (honest / "patch.diff").write_text(HONEST_PATCH)
    (honest / "artifacts").mkdir(exist_ok=True)
    (honest / "artifacts" / "same.patch").symlink_to("../patch.diff")
    # A run folder of the root that is a link to the run outside it, and a run whose own files link out of it.
    (served / "demo" / "linked-run").symlink_to(other)
    with open(other / "trials.jsonl", "a") as trials:
        trials.write(json.dumps({"task_id": SECRET, "attempt": 1, "status": "passed"}) + "\n")
    (other / "summary.json").write_text(json.dumps({"tasks": 1, "note": SECRET}))
    ghost = served / "ghosts" / "ghost"
    ghost.mkdir(parents=True)
    (ghost / "run.json").write_text((run_dir / "run.json").read_text())
    for name in ("trials.jsonl", "summary.json"):
        (ghost / name).symlink_to(other / name)
    return {"served": served, "run": run_dir, "other": other}


@pytest.fixture(scope="module")
def viewer(planted):
    running = Viewer(str(planted["served"]))
    yield running
    running.stop()


def attempt_url(viewer: Viewer, planted: dict[str, Path], task: str, suffix: str = "") -> str:
    run_id = "0/" + planted["run"].relative_to(planted["served"]).as_posix()
    return f"{viewer.base}/attempt?run={run_id}&task={task}&n=1{suffix}"


def test_no_link_out_of_an_attempts_folder_is_ever_followed(viewer, planted):
    page_html = get(attempt_url(viewer, planted, "fix-median-bug")).text
    assert "no patch file in this attempt" in page_html
    assert SECRET not in page_html and "root:" not in page_html and "/bin/bash" not in page_html
    run_id = "0/" + planted["run"].relative_to(planted["served"]).as_posix()
    for name in ("leak.patch", "patch.diff", "artifacts/leak.patch", "agent.log", "verifier.log", "x.traj.json",
                 "model_calls.jsonl"):
        served = get(f"{viewer.base}/file?run={run_id}&task=fix-median-bug&n=1&file={name}")
        assert served.status_code == 404, (name, served.text[:200])
        assert SECRET not in served.text and "root:" not in served.text
        assert f">{name}<" not in page_html  # not listed among the attempt's files either
    assert ">result.json<" in page_html  # the attempt's own files still are
    linked = get(attempt_url(viewer, planted, "fix-backup-script")).text
    assert SECRET not in linked and "stolen.patch" not in linked and "no patch file in this attempt" in linked
    stolen = get(f"{viewer.base}/file?run={run_id}&task=fix-backup-script&n=1&file=artifacts/stolen.patch")
    assert stolen.status_code == 404 and SECRET not in stolen.text


def test_a_tampered_attempt_shows_its_evidence(viewer, planted):
    page_html = get(attempt_url(viewer, planted, "git-revert-bad-commit")).text
    banner = page_html.split('id="tampered">')[1].split("</p>")[0]
    assert "the attempt is failed" in banner and "/logs/artifacts/x: a link to /etc/shadow" in banner


def test_no_run_file_is_read_through_a_link_out_of_its_run(viewer, planted):
    listing = get(viewer.base + "/api/runs")
    assert sorted(r["name"] for r in listing.json()["runs"]) == sorted([planted["run"].name, "ghost"])
    assert get(viewer.base + "/run?run=0/demo/linked-run").status_code == 404
    rows = get(viewer.base + "/api/rows?run=0/ghosts/ghost")  # its trials.jsonl and summary.json lead out of it
    assert rows.status_code == 200 and rows.json()["rows"] == [] and SECRET not in rows.text + listing.text


def test_an_honest_patch_and_a_link_inside_the_attempt_are_shown(viewer, planted):
    page_html = get(attempt_url(viewer, planted, "csv-sales-report")).text
    assert '<span class="add">+a = 2</span>' in page_html
    run_id = "0/" + planted["run"].relative_to(planted["served"]).as_posix()
    same = get(f"{viewer.base}/file?run={run_id}&task=csv-sales-report&n=1&file=artifacts/same.patch")
    assert same.status_code == 200 and same.text == HONEST_PATCH


def test_every_response_says_what_the_browser_may_do_with_it(viewer, planted):
    run_id = "0/" + planted["run"].relative_to(planted["served"]).as_posix()
    for path in ("/", "/api/runs", f"/run?run={run_id}", "/static/view.js", "/run?run=0/nowhere",
                 f"/file?run={run_id}&task=csv-sales-report&n=1&file=patch.diff"):
        headers = get(viewer.base + path).headers
        assert "script-src 'self'" in headers["content-security-policy"] and "frame-ancestors 'none'" in headers[
            "content-security-policy"], path
        assert headers["x-content-type-options"] == "nosniff" and headers["referrer-policy"] == "no-referrer", path
    refused = get(viewer.base + "/", headers={"Host": "attacker.example"})
    assert refused.status_code == 400 and refused.headers["x-content-type-options"] == "nosniff"


def test_the_pages_and_the_report_work_under_their_policies(viewer, planted, page, cli):  # noqa: F811
    """The runs page fills itself from the viewer's own script; the report's inline charts draw; nothing is blocked."""
    violations: list[str] = []
    page.on("console", lambda message: violations.append(message.text) if "Content Security Policy" in message.text else None)
    page.goto(viewer.base + "/")
    page.wait_for_selector("#runs tbody tr")
    grid = "0/" + planted["run"].relative_to(planted["served"]).as_posix()
    page.goto(f"{viewer.base}/run?run={grid}")
    page.wait_for_selector("#grid td.cell")
    assert cli("report", str(planted["served"] / "demo")).returncode == 0
    page.goto(f"{viewer.base}/report?run={grid}")
    page.wait_for_selector(".main-svg", timeout=30_000)
    assert violations == []


def test_a_short_token_is_refused_in_one_line(cli, planted):
    for token in ("abc", "x" * 15, "a-long-enough-token but spaced"):
        refused = cli("view", str(planted["served"]), "--token", token, "--port", "0")
        assert refused.returncode == 2, refused.stderr
        assert refused.stderr.count("\n") == 1 and "at least 16 characters" in refused.stderr, refused.stderr


def test_a_busy_port_is_one_line_that_suggests_another(cli, planted):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        refused = cli("view", str(planted["served"]), "--port", str(port))
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.count("\n") == 1 and f"port {port}" in refused.stderr and "--port 0" in refused.stderr


def test_ctrl_c_stops_the_viewer_without_a_runs_message(planted):
    running = Viewer(str(planted["served"]))
    running.proc.send_signal(signal.SIGINT)
    rest = running.proc.stderr.read()  # type: ignore[union-attr]
    assert running.proc.wait(timeout=30) == 0
    assert "run-name" not in rest and "sandboxes" not in rest and "Traceback" not in rest
    assert rest.strip().splitlines()[-1] == "agentcompass view: stopped"


def test_sweep_jobs_that_differ_in_run_settings_are_told_apart(tmp_path, page):  # noqa: F811
    results = tmp_path / "results"
    oracle_run(results, "ks", "-m", "run.k=1,2")
    viewer = Viewer(str(results))
    try:
        runs = get(viewer.base + "/api/runs").json()["runs"]
        assert sorted(r["settings"] for r in runs) == ["run.k=1", "run.k=2"]
        page.goto(viewer.base + "/")
        page.wait_for_selector("#runs tbody tr")
        names = page.locator("#runs tbody tr td:nth-child(3) a").all_inner_texts()
        assert len(set(names)) == 2 and all(re.search(r"run\.k=[12]$", n) for n in names), names
        ids = "&".join(f"run={r['id']}" for r in runs)
        solved = get(f"{viewer.base}/compare?{ids}").text
        assert "run.k=1" in solved and "run.k=2" in solved
        steps = get(f"{viewer.base}/compare?task=fix-median-bug&{ids}").text
        assert "run.k=1" in steps and "run.k=2" in steps
    finally:
        viewer.stop()


def test_a_refused_start_writes_nothing(tmp_path):
    """A refusal comes before anything is written (the live-viewer entry for `report`, an index)."""
    done = subprocess.run([sys.executable, "-m", "agentcompass", "view", str(tmp_path), "--token", "short"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and not list(tmp_path.iterdir())
