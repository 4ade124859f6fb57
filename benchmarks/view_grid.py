"""How long `agentcompass view` takes to open a big run's grid: a 10,000-trial run made here
(2,500 tasks x 4 attempts, records shaped as trials.jsonl holds them), served by the real viewer,
timed in Debian's Chromium from navigation to the last grid row drawn.

    python benchmarks/view_grid.py [--trials 10000]

Prints three rows: the first open (the index is built from trials.jsonl and cached beside the run),
a second open by a new viewer process (the cached index), and the JSON endpoint alone; each with
the time the grid took and its ratio to the 2 s target."""

from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_S = 2.0
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]


def make_run(root: Path, trials: int, attempts: int = 4) -> Path:
    run_dir = root / "big" / "swebench_verified__mini_swe_agent__glm-5.2__docker"
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"status": "completed", "config": {
        "labels": {"benchmark": "swebench_verified", "harness": "mini_swe_agent", "model": "glm-5.2", "env": "docker"},
        "model": {"name": "openai/zai-org/GLM-5.2-FP8", "reasoning": "high"}, "run": {"k": attempts}}}))
    (run_dir / "summary.json").write_text(json.dumps({"tasks": trials // attempts, "trials_expected": trials}))
    rng = random.Random(0)
    with open(run_dir / "trials.jsonl", "w") as out:
        for n in range(trials):
            status = rng.choice(["passed", "failed", "failed", "error"])
            out.write(json.dumps({
                "task_id": f"repo__project-{n // attempts:05d}", "attempt": n % attempts + 1, "status": status,
                "error_category": "agent" if status == "error" else None, "message": "" if status != "error" else
                "model returned 400: content filter", "reward": float(status == "passed"), "rewards": {},
                "agent_exit_status": "submitted", "timings": {"total": rng.uniform(30, 900)},
                "usage": {"model_calls": 40, "tokens_in": 400_000, "tokens_out": 9_000, "cost_usd": rng.uniform(0.1, 2),
                          "cost_known": True}, "retries": 0, "started_at": "2026-12-01T00:00:00+00:00",
                "finished_at": "2026-12-01T00:10:00+00:00", "details": {}}) + "\n")
    return run_dir


def start_viewer(root: Path) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "agentcompass", "view", str(root), "--port", "0"],
                            stderr=subprocess.PIPE, text=True)
    line = proc.stderr.readline()  # type: ignore[union-attr]
    return proc, re.search(r"(http://\S+?)/?\s", line).group(1)  # type: ignore[union-attr]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=10_000)
    args = parser.parse_args()
    from playwright.sync_api import expect, sync_playwright

    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as driver:
        root = Path(tmp)
        run_dir = make_run(root, args.trials)
        run_id = "0/" + run_dir.relative_to(root).as_posix()
        browser = driver.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        rows = []
        for label in ("first open (index built)", "new viewer (index cached)"):
            proc, base = start_viewer(root)
            start = time.perf_counter()
            page.goto(f"{base}/run?run={run_id}")
            # expect() polls from Playwright's own world: the viewer's policy forbids evaluating strings in the page.
            expect(page.locator("#grid tbody tr")).to_have_count(args.trials // 4, timeout=120_000)
            rows.append((label, time.perf_counter() - start))
            if label.startswith("new"):
                import httpx

                start = time.perf_counter()
                httpx.get(f"{base}/api/rows?run={run_id}", timeout=60).raise_for_status()
                rows.append(("JSON rows alone (cached)", time.perf_counter() - start))
            proc.terminate()
            proc.wait()
        browser.close()
    print(f"{args.trials} trials, target {TARGET_S:.1f} s")
    for label, seconds in rows:
        print(f"  {label:28s} {seconds:6.2f} s  {seconds / TARGET_S:5.2f} x target")


if __name__ == "__main__":
    main()
