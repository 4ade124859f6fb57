"""`agentcompass view` as a user meets it: real runs made here, the real server, Debian's Chromium driven
by Playwright for the pages, and plain HTTP for the security rules."""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from conftest import REPO, run_cli, skip_or_fail
from fake_llm_server import FakeLLM, FakeLLMServer

get = functools.partial(httpx.get, timeout=60)  # httpx's 5 s default is short for a busy machine
FIX_COMMANDS = [
    "cd /app && python3 -m unittest test_stats 2>&1 | tail -3",
    "sed -i 's/return (data\\[mid\\] + data\\[mid + 1\\]) \\/ 2/return (data[mid - 1] + data[mid]) \\/ 2/' /app/stats.py"
    " && python3 -m unittest test_stats",
    "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT",
]
LAZY_COMMANDS = [FIX_COMMANDS[0], "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"]  # looks, then gives up
TASKS = json.dumps({"sample_ids": ["fix-median-bug", "csv-sales-report"]})
PLANTED_KEY = "sk-ant-api03-" + "Q" * 40
ARTIFACTS = Path(os.environ.get("AGENTCOMPASS_TEST_ARTIFACTS", REPO / "test-artifacts")) / "view"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


def mini_run(results: Path, run_name: str, commands: list[str], *extra: str, delay_s: float = 0.0,
             wait: bool = True) -> subprocess.Popen | None:
    llm = FakeLLM(commands, delay_s=delay_s)
    server = FakeLLMServer(llm).__enter__()
    args = [sys.executable, "-m", "agentcompass", "run", "demo", "mini_swe_agent", "glm-5.2", "--model-base-url",
            server.base_url, "--model-api-key", "sk-test-view", "--results-dir", str(results), "--run-name", run_name,
            "--benchmark-params", TASKS, *extra]
    env = {**os.environ, "MSWEA_GLOBAL_CONFIG_DIR": "", "OPENAI_API_KEY": ""}
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if not wait:
        proc.server = server  # type: ignore[attr-defined]  # stopped by the caller
        return proc
    out, err = proc.communicate(timeout=300)
    server.__exit__(None, None, None)
    assert proc.returncode == 0, err
    return None


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    """Real runs: the demo's oracle and nop (k=2), a mini_swe_agent sweep over two tiers, and a lazier agent."""
    root = tmp_path_factory.mktemp("view") / "results"
    for harness, k in (("oracle", "1"), ("nop", "2")):
        done = run_cli("run", "demo", harness, "none", "--k", k, "--results-dir", str(root), "--run-name", "demo")
        assert done.returncode == 0, done.stderr
    mini_run(root, "tiers", FIX_COMMANDS, "-m", "model.reasoning=none,high")
    mini_run(root, "lazy", LAZY_COMMANDS)
    # A SWE-bench attempt keeps its patch as patch.diff (docs/results.md); give one attempt a patch and a
    # log line holding a key the agent printed, to see both as a user would.
    attempt = next((root / "tiers").glob("*reasoning=high")) / "tasks" / "fix-median-bug" / "attempt-1"
    (attempt / "patch.diff").write_text("diff --git a/stats.py b/stats.py\n--- a/stats.py\n+++ b/stats.py\n"
                                        "@@ -1,2 +1,2 @@\n-    return (data[mid] + data[mid + 1]) / 2\n"
                                        "+    return (data[mid - 1] + data[mid]) / 2\n")
    with open(attempt / "agent.log", "a") as log:
        log.write(f"found ANTHROPIC_API_KEY={PLANTED_KEY} in the environment\n")
    return root


class Viewer:
    def __init__(self, *args: str, env: dict[str, str] | None = None):
        self.proc = subprocess.Popen([sys.executable, "-m", "agentcompass", "view", *args, "--port", "0"],
                                     stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})
        line = self.proc.stderr.readline()  # type: ignore[union-attr]
        found = re.search(r"(http://\S+)", line)
        assert found, line
        self.url = found.group(1)
        self.base = self.url.split("?")[0].rstrip("/")

    def stop(self) -> None:
        self.proc.send_signal(2)
        self.proc.wait(timeout=10)


@pytest.fixture(scope="module")
def viewer(results):
    running = Viewer(str(results))
    yield running
    running.stop()


@pytest.fixture(scope="module")
def page():
    if shutil.which("chromium") is None:
        skip_or_fail("no chromium (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=shutil.which("chromium"), args=CHROMIUM_ARGS)
        tab = browser.new_page(viewport={"width": 1400, "height": 1000})
        yield tab
        browser.close()


def run_id(results: Path, run_dir: Path) -> str:
    return "0/" + run_dir.relative_to(results).as_posix()


def last_records(run_dir: Path) -> dict[tuple[str, int], dict]:
    records = {}
    for line in (run_dir / "trials.jsonl").read_text().splitlines():
        record = json.loads(line)
        records[(record["task_id"], record["attempt"])] = record
    return records


def shot(page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def test_the_runs_page_lists_every_run_with_its_figures(viewer, page, results):
    page.goto(viewer.base + "/")
    page.wait_for_selector("#runs tbody tr")
    rows = page.locator("#runs tbody tr")
    assert rows.count() == 5  # oracle, nop, two tiers, lazy
    nop = page.locator("#runs tbody tr", has_text="nop")
    assert "0 / 6" in nop.inner_text() and "0.0 %" in nop.inner_text()
    oracle = page.locator("#runs tbody tr", has_text="oracle")
    assert "100.0 %" in oracle.inner_text() and "6 / 6" in oracle.inner_text()
    shot(page, "runs")


def test_the_grid_shows_each_attempts_verdict_as_trials_jsonl_records_it(viewer, page, results):
    run_dir = results / "demo" / "demo__nop__none__local"
    page.goto(f"{viewer.base}/run?run={run_id(results, run_dir)}")
    page.wait_for_selector("#grid tbody tr")
    cells = page.locator("#grid td.cell[data-task]")
    seen = {(cells.nth(i).get_attribute("data-task"), int(cells.nth(i).get_attribute("data-attempt"))):
            cells.nth(i).get_attribute("data-status") for i in range(cells.count())}
    assert seen == {key: r["status"] for key, r in last_records(run_dir).items()}
    assert len(seen) == 12
    page.select_option("#f-status", "passed")
    assert page.locator("#grid tbody tr").count() == 0  # nop passes nothing
    shot(page, "grid")


def test_an_attempt_shows_its_commands_their_output_and_its_patch(viewer, page, results):
    run_dir = next((results / "tiers").glob("*reasoning=high"))
    page.goto(f"{viewer.base}/attempt?run={run_id(results, run_dir)}&task=fix-median-bug&n=1")
    commands = page.locator("#steps pre.command").all_inner_texts()
    assert commands == [f"$ {c}" for c in FIX_COMMANDS]
    assert "OK" in page.locator("#steps pre.output").nth(1).inner_text()  # the tests pass after the fix
    assert page.locator("#patch span.add").inner_text().startswith("+    return (data[mid - 1]")
    assert page.locator("#verdict").inner_text().startswith("passed")
    assert PLANTED_KEY not in page.content()  # the key the agent printed is masked
    shot(page, "attempt")


def test_compare_marks_where_two_setups_first_ran_different_commands(viewer, page, results):
    tier = run_id(results, next((results / "tiers").glob("*reasoning=high")))
    lazy = run_id(results, next((results / "lazy").glob("demo__*")))
    page.goto(f"{viewer.base}/compare?task=fix-median-bug&run={tier}&run={lazy}")
    assert page.locator("#divergence").inner_text() == "first divergence at step 2"
    assert page.locator("tr.diverge td").first.inner_text() == "2"
    shot(page, "compare")
    none = run_id(results, next((results / "tiers").glob("*reasoning=none")))
    page.goto(f"{viewer.base}/compare?task=fix-median-bug&run={tier}&run={none}")
    assert page.locator("#divergence").inner_text() == "the same commands in every step"
    page.goto(f"{viewer.base}/compare?run={tier}&run={lazy}")
    solved = page.locator("#solved tbody tr", has_text="fix-median-bug").locator("td")
    assert [solved.nth(i).inner_text() for i in (1, 2)] == ["1/1", "0/1"]


def test_a_running_runs_counts_change_on_the_page_without_a_reload(results, page, tmp_path):
    live_root = tmp_path / "live"
    proc = mini_run(live_root, "live", FIX_COMMANDS, "--k", "4", "--task-concurrency", "1", delay_s=0.3, wait=False)
    try:
        deadline = time.monotonic() + 60
        while not list(live_root.glob("live/*/trials.jsonl")) and time.monotonic() < deadline:
            time.sleep(0.2)
        run_dir = next(live_root.glob("live/demo__*"))
        viewer = Viewer(str(live_root))
        try:
            page.goto(f"{viewer.base}/run?run={run_id(live_root, run_dir)}")
            page.wait_for_selector("#run-trials")
            first = page.locator("#run-trials").inner_text()
            assert page.locator("#run-status").inner_text() == "running"
            from playwright.sync_api import expect

            # expect() polls from Playwright's own world: the page's policy forbids evaluating strings in it.
            expect(page.locator("#run-trials")).not_to_have_text(first, timeout=60_000)
            assert page.locator("#run-trials").inner_text() != first
        finally:
            viewer.stop()
    finally:
        proc.send_signal(2)
        proc.communicate(timeout=60)
        proc.server.__exit__(None, None, None)  # type: ignore[union-attr]


def test_no_path_outside_the_results_roots_is_served(viewer, results):
    run = run_id(results, results / "demo" / "demo__oracle__none__local")
    outside = ["/run?run=0/..", "/run?run=0/../..", "/run?run=1/x", "/run?run=0/%2e%2e/%2e%2e/etc",
               f"/file?run={run}&task=fix-median-bug&n=1&file=../../../run.json",
               f"/file?run={run}&task=fix-median-bug&n=1&file=/etc/passwd",
               f"/file?run={run}&task=../../..&n=1&file=run.json",
               "/static/../app.py", "/static/%2e%2e/app.py"]
    for path in outside:
        response = get(viewer.base + path)
        assert response.status_code == 404, (path, response.status_code)
        assert "root:" not in response.text and '"config"' not in response.text
    inside = get(f"{viewer.base}/file?run={run}&task=fix-median-bug&n=1&file=result.json")
    assert inside.status_code == 200 and '"task_id"' in inside.text


def test_another_host_header_is_refused_on_loopback(viewer):
    assert get(viewer.base + "/api/runs", headers={"Host": "attacker.example"}).status_code == 400


def test_a_token_is_required_on_every_request_when_set(results):
    viewer = Viewer(str(results), "--token")
    try:
        token = viewer.url.split("token=")[1]
        assert len(token) >= 24
        assert get(viewer.base + "/api/runs").status_code == 401
        assert get(viewer.base + "/api/runs?token=wrong").status_code == 401
        bearer = {"Authorization": f"Bearer {token}"}
        assert get(viewer.base + "/api/runs", headers=bearer).status_code == 200
        with httpx.Client(timeout=60) as client:
            assert client.get(viewer.url).status_code == 200
            assert client.get(viewer.base + "/api/runs").status_code == 200  # the cookie the first visit set
    finally:
        viewer.stop()


def test_a_host_other_than_loopback_needs_a_token(cli, results):
    refused = cli("view", str(results), "--host", "0.0.0.0")
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1 and "--token" in refused.stderr and "Traceback" not in refused.stderr


def test_a_missing_results_dir_is_one_line(cli, tmp_path):
    refused = cli("view", str(tmp_path / "nowhere"))
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "nowhere" in refused.stderr


def test_each_setup_links_to_the_report_made_over_its_sweep(results, cli):
    made = cli("report", str(results / "tiers"))
    assert made.returncode == 0, made.stderr
    viewer = Viewer(str(results))
    try:
        runs = get(viewer.base + "/api/runs").json()["runs"]
        links = {r["sweep"]: r["report"] for r in runs}
        assert links["demo"] is None and links["tiers"]
        page = get(viewer.base + links["tiers"])
        assert page.status_code == 200 and "<html" in page.text.lower()
    finally:
        viewer.stop()


def test_the_report_links_each_setup_into_a_running_viewer_and_not_once_it_stopped(results, cli, tmp_path):
    cache = {"AGENTCOMPASS_CACHE_DIR": str(tmp_path / "cache")}
    viewer = Viewer(str(results), env=cache)
    try:
        assert cli("report", str(results / "tiers"), env=cache).returncode == 0
        page = (results / "tiers" / "report" / "report.html").read_text()
        links = re.findall(r'<a href="([^"]+)">', page.split('id="viewer-links"')[1].split("</p>")[0])
        assert sorted(links) == sorted(f"{viewer.base}/run?run=0/tiers/{d.name}".replace("=", "%3D").replace(
            "run?run%3D", "run?run=") for d in (results / "tiers").glob("demo__*"))
        assert all(get(link).status_code == 200 for link in links)
        assert cli("report", str(results / "tiers"), "--verify", env=cache).returncode == 0  # a link is no figure
    finally:
        viewer.stop()
    assert cli("report", str(results / "tiers"), env=cache).returncode == 0
    assert 'id="viewer-links"' not in (results / "tiers" / "report" / "report.html").read_text()
    assert list((tmp_path / "cache" / "viewers").glob("*.json")) == []  # the viewer removed its entry
