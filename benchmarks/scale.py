"""The orchestrator at scale: thousands of trials on a simulated provider.

Generates N trivial Harbor-format tasks and runs them with the oracle on `sim_provider`
(benchmarks/sim_provider.py, loaded by its dotted path): a sandbox open costs 0.2 s and each
command 0.05 s, nothing else costs anything, so the rest is the orchestrator's own time.

    python benchmarks/scale.py [--runs 10000:1000 2000:500] [--processes auto 1] [--open-s 0.2] [--command-s 0.05]

Per size it prints the command's wall time against the ideal (rounds of `concurrency` trials,
each taking the simulated open + commands), trials/s, its CPU time (user + system: on a shared
machine it varies far less than the wall), the peak RSS of the `agentcompass run` process, the
per-trial overhead (a trial's time minus its open and its commands, as recorded in trials.jsonl), the start-up (launch to the first trial: interpreter, composition, loading
the tasks) and the span from the first trial's start to the last one's end. Targets: wall <= 2x ideal, peak RSS <= 300 MiB, overhead p50 <= 5 ms.
Everything is written under the temp dir (TMPDIR); the header says what a mkdir and a file create cost
there, as each trial makes a few of both.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from harbor_factory import make_file_tasks, make_recipe  # noqa: E402


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds (user + system) and peak RSS (KiB) of one command, measured in a fresh child."""
    probe = (
        "import resource, subprocess, sys, time; t = time.monotonic(); "
        "rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode; "
        "u = resource.getrusage(resource.RUSAGE_CHILDREN); "
        "print(time.monotonic() - t, u.ru_utime + u.ru_stime, u.ru_maxrss, rc)"
    )
    out = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, check=True,
                         env=env).stdout
    wall, cpu, rss, rc = out.split()
    if rc != "0":
        raise SystemExit(f"command failed ({rc}): {' '.join(argv)}")
    return float(wall), float(cpu), int(rss)


def create_cost_us(folder: Path, count: int = 2000) -> tuple[float, float]:
    """Microseconds to create a directory, then a file in it, on `folder`'s filesystem: a trial creates
    a few of each, and on some filesystems (ext4 without a journal, soon after many files were deleted)
    each costs many times what it does on tmpfs. The figures below are only comparable with this."""
    probe = folder / "create-probe"
    probe.mkdir()
    start = time.perf_counter()
    for i in range(count):
        os.mkdir(probe / str(i))
    made = time.perf_counter()
    for i in range(count):
        os.close(os.open(probe / str(i) / "f", os.O_WRONLY | os.O_CREAT, 0o644))
    done = time.perf_counter()
    return (made - start) / count * 1e6, (done - made) / count * 1e6


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", nargs="+", default=["10000:1000", "2000:500"], help="TRIALS:CONCURRENCY ...")
    parser.add_argument("--processes", nargs="+", default=["auto"],
                        help="run.processes per size, each its own row: auto (the default) or a number")
    parser.add_argument("--open-s", type=float, default=0.2)
    parser.add_argument("--command-s", type=float, default=0.05)
    args = parser.parse_args()
    sizes = [tuple(int(x) for x in run.split(":")) for run in args.runs]

    work = Path(tempfile.mkdtemp(prefix="ac-scale-"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))}
    try:
        for trials, _ in sizes:  # a dataset per size: loading is part of the run, and sized with it
            make_file_tasks(work / f"data{trials}", trials)
            make_recipe(work / "conf", f"scale{trials}", work / f"data{trials}")
        (work / "conf" / "providers").mkdir(parents=True)
        (work / "conf" / "providers" / "sim.yaml").write_text(
            f"name: sim\nimpl: sim_provider:SimProvider\nopen_s: {args.open_s}\ncommand_s: {args.command_s}\n")
        mkdir_us, create_us = create_cost_us(work)
        print(f"Harbor tasks, oracle, simulated provider (open {args.open_s} s, command {args.command_s} s), "
              f"{time.strftime('%Y-%m-%d')}; results on {work}: mkdir {mkdir_us:.0f} µs, file create {create_us:.0f} µs\n")
        print("| trials | concurrency | processes | wall s | ideal s | wall/ideal | trials/s | CPU s | peak RSS MiB "
              "| overhead p50 ms | p90 ms | start-up s | trials span s |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for (trials, concurrency), processes in ((size, p) for size in sizes for p in args.processes):
            run_name = f"n{trials}-c{concurrency}-p{processes}"
            launched = time.time()
            wall, cpu, rss = timed([
                sys.executable, "-m", "agentcompass", "run", f"scale{trials}", "oracle", "none", "--env", "sim",
                "--config-dir", str(work / "conf"), "--task-concurrency", str(concurrency),
                "--results-dir", str(work / "results"), "--run-name", run_name,
                *([] if processes == "auto" else [f"run.processes={processes}"]),
            ], env)
            run_dir = work / "results" / run_name / f"scale{trials}__oracle__none__sim"
            rows = [json.loads(line) for line in (run_dir / "trials.jsonl").read_text().splitlines()]
            assert len(rows) == trials and all(r["status"] == "passed" for r in rows), "not every trial passed"
            commands = round(statistics.median(r["timings"]["commands"] for r in rows) / args.command_s)
            trial_s = args.open_s + commands * args.command_s
            ideal = math.ceil(trials / concurrency) * trial_s
            first = min(datetime.fromisoformat(r["started_at"]).timestamp() for r in rows)
            last = max(datetime.fromisoformat(r["finished_at"]).timestamp() for r in rows)
            overheads = [(r["timings"]["total"] - r["timings"]["open"] - r["timings"]["commands"]) * 1000 for r in rows]
            print(f"| {trials} | {concurrency} | {processes} | {wall:.1f} | {ideal:.1f} | {wall / ideal:.2f} | {trials / wall:.0f} "
                  f"| {cpu:.1f} | {rss / 1024:.0f} | {percentile(overheads, 0.5):.1f} | {percentile(overheads, 0.9):.1f} "
                  f"| {first - launched:.1f} | {last - first:.1f} |",
                  flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
