"""Orchestration overhead on the local provider, and CLI start-up time.

N tiny Harbor-format tasks run with the oracle (isolation none and bwrap) at
concurrency 1, 4 and 16. Per-trial overhead = the trial's wall time (open → close)
minus the time spent inside task commands, both as recorded in trials.jsonl.
Peak RSS is the largest resident size of the `agentcompass run` process tree.

    python benchmarks/local_overhead.py [--tasks 500] [--concurrency 1 4 16]
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from harbor_factory import make_file_tasks, make_recipe  # noqa: E402

AGENTCOMPASS = [sys.executable, "-m", "agentcompass"]


def timed(argv: list[str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB) of one command, measured in a fresh child."""
    probe = (
        "import resource, subprocess, sys, time; t = time.monotonic(); "
        "rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode; "
        "print(time.monotonic() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, rc)"
    )
    out = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, check=True).stdout
    wall, rss, rc = out.split()
    if rc != "0":
        raise SystemExit(f"command failed ({rc}): {' '.join(argv)}")
    return float(wall), int(rss)


def startup(argv: list[str], repeats: int = 7) -> float:
    exe = shutil.which("agentcompass") or sys.executable
    cmd = [exe, *argv] if exe != sys.executable else [*AGENTCOMPASS, *argv]
    return statistics.median(timed(cmd)[0] for _ in range(repeats))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=500)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--isolation", nargs="+", default=["none", "bwrap"])
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="ac-bench-"))
    try:
        make_file_tasks(work / "data", args.tasks)
        make_recipe(work / "conf", "tiny", work / "data")
        print(f"{args.tasks} tiny Harbor tasks, oracle, local provider, {time.strftime('%Y-%m-%d')}\n")
        print("| isolation | concurrency | wall s | trials/s | overhead ms/trial (mean) | p95 ms | peak RSS MiB |")
        print("|---|---|---|---|---|---|---|")
        for isolation in args.isolation:
            if isolation == "bwrap" and shutil.which("bwrap") is None:
                print("| bwrap | - | skipped: bubblewrap not installed | | | | |")
                continue
            for concurrency in args.concurrency:
                run_name = f"{isolation}-c{concurrency}"
                wall, rss = timed([
                    *AGENTCOMPASS, "run", "tiny", "oracle", "none", "--config-dir", str(work / "conf"),
                    "--task-concurrency", str(concurrency), "--env-params", json.dumps({"isolation": isolation}),
                    "--results-dir", str(work / "results"), "--run-name", run_name,
                ])
                run_dir = work / "results" / run_name / "tiny__oracle__none__local"
                trials = [json.loads(line) for line in (run_dir / "trials.jsonl").read_text().splitlines()]
                assert len(trials) == args.tasks and all(t["status"] == "passed" for t in trials), "not all passed"
                overheads = sorted((t["timings"]["total"] - t["timings"]["commands"]) * 1000 for t in trials)
                p95 = overheads[int(0.95 * (len(overheads) - 1))]
                print(f"| {isolation} | {concurrency} | {wall:.1f} | {args.tasks / wall:.1f} | "
                      f"{statistics.mean(overheads):.1f} | {p95:.1f} | {rss / 1024:.0f} |", flush=True)
        print()
        print(f"agentcompass --help: {startup(['--help']) * 1000:.0f} ms (median of 7)")
        print(f"agentcompass list:   {startup(['list']) * 1000:.0f} ms (median of 7)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_NOFILE, (4096, 4096))
    main()
