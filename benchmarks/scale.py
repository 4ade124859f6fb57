"""The orchestrator at scale: thousands of trials on a simulated provider, and what each costs it.

Generates N trivial Harbor-format tasks and runs them with the oracle on `sim_provider`
(benchmarks/sim_provider.py, loaded by its dotted path): a sandbox open costs 0.2 s and each
command 0.05 s (a Harbor trial runs three: the solution, clearing the verifier's inputs, the tests),
nothing else costs anything, so the rest is the orchestrator's own time.

    python benchmarks/scale.py [--runs 10000:1000 2000:500] [--processes auto 1] [--open-s 0.2] [--command-s 0.05]

First the fixed start-up: a one-task run, launch to its trial's start (interpreter, imports, composition),
the median of three. Then per size: the command's wall time against the ideal (rounds of `concurrency`
trials, each taking the simulated open + commands), `wall/ideal` and, without the fixed start-up,
`(wall-fixed)/ideal` (the targets: <= 1.5 at 10,000 x 1,000 and 2,000 x 500, and a fixed start-up under
1 s); the orchestrator's wall beyond the ideal and the fixed start-up per trial (`extra ms/trial`: small
and the same at every size when the cost is flat); its CPU (user + system, this process and its workers)
per trial beyond the one-task run's (`CPU ms/trial`: on a busy machine it moves far less than the wall,
so it is the regression check to compare); the peak RSS of the `agentcompass run` process; the in-trial
overhead (a trial's time minus its open and its commands, as trials.jsonl records it); the start-up of
this size (launch to the first trial: the fixed part plus loading the tasks); the span from the first
trial's start to the last one's end, and the tail from there to the process's exit.

The child processes get compiled bytecode as an installed package has it (PYTHONPYCACHEPREFIX under the
temp dir, PYTHONDONTWRITEBYTECODE dropped), so the figures do not include compiling the sources.
Everything is written under the temp dir (TMPDIR); the header says what a mkdir and a file create cost
there, as each trial makes a few of both (on ext4 without a journal, creating files within minutes of
deleting many costs several times more), and the load average, as the wall times move with it.
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


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, float, int]:
    """When it was launched (time.time()), wall seconds, CPU seconds (user + system) and peak RSS (KiB) of one
    command, measured in a fresh child."""
    probe = (
        "import resource, subprocess, sys, time; at = time.time(); t = time.monotonic(); "
        "rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode; "
        "u = resource.getrusage(resource.RUSAGE_CHILDREN); "
        "print(at, time.monotonic() - t, u.ru_utime + u.ru_stime, u.ru_maxrss, rc)"
    )
    out = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, check=True,
                         env=env).stdout
    launched, wall, cpu, rss, rc = out.split()
    if rc != "0":
        raise SystemExit(f"command failed ({rc}): {' '.join(argv)}")
    return float(launched), float(wall), float(cpu), int(rss)


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
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
           "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])),
           "PYTHONPYCACHEPREFIX": str(work / "pycache")}  # bytecode as an installed package has it
    try:
        for trials in sorted({1, *(t for t, _ in sizes)}):  # a dataset per size: loading is part of the run
            make_file_tasks(work / f"data{trials}", trials)
            make_recipe(work / "conf", f"scale{trials}", work / f"data{trials}")
        (work / "conf" / "providers").mkdir(parents=True)
        (work / "conf" / "providers" / "sim.yaml").write_text(
            f"name: sim\nimpl: sim_provider:SimProvider\nopen_s: {args.open_s}\ncommand_s: {args.command_s}\n")
        mkdir_us, create_us = create_cost_us(work)

        def run(trials: int, concurrency: int, run_name: str, processes: str = "auto") -> dict[str, float]:
            launched, wall, cpu, rss = timed([
                sys.executable, "-m", "agentcompass", "run", f"scale{trials}", "oracle", "none", "--env", "sim",
                "--config-dir", str(work / "conf"), "--task-concurrency", str(concurrency),
                "--results-dir", str(work / "results"), "--run-name", run_name,
                *([] if processes == "auto" else [f"run.processes={processes}"]),
            ], env)
            exited = launched + wall
            run_dir = work / "results" / run_name / f"scale{trials}__oracle__none__sim"
            rows = [json.loads(line) for line in (run_dir / "trials.jsonl").read_text().splitlines()]
            assert len(rows) == trials and all(r["status"] == "passed" for r in rows), "not every trial passed"
            commands = round(statistics.median(r["timings"]["commands"] for r in rows) / args.command_s)
            first = min(datetime.fromisoformat(r["started_at"]).timestamp() for r in rows)
            last = max(datetime.fromisoformat(r["finished_at"]).timestamp() for r in rows)
            overheads = [(r["timings"]["total"] - r["timings"]["open"] - r["timings"]["commands"]) * 1000 for r in rows]
            return {"wall": wall, "cpu": cpu, "rss": rss, "trial_s": args.open_s + commands * args.command_s,
                    "startup": first - launched, "span": last - first, "tail": exited - last,
                    "p50": percentile(overheads, 0.5), "p90": percentile(overheads, 0.9)}

        run(1, 1, "warm-up")  # compiles the bytecode
        singles = [run(1, 1, f"single{i}") for i in range(3)]
        fixed = statistics.median(r["startup"] for r in singles)
        fixed_cpu = statistics.median(r["cpu"] for r in singles)
        print(f"Harbor tasks, oracle, simulated provider (open {args.open_s} s, command {args.command_s} s), "
              f"{time.strftime('%Y-%m-%d %H:%M')}, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; "
              f"results on {work}: mkdir {mkdir_us:.0f} µs, file create {create_us:.0f} µs\n")
        print(f"Fixed start-up (one task, launch to its trial's start, median of 3): {fixed:.2f} s "
              f"(CPU of that whole run {fixed_cpu:.2f} s)\n")
        print("| trials | concurrency | processes | wall s | ideal s | wall/ideal | (wall-fixed)/ideal | extra ms/trial "
              "| CPU s | CPU ms/trial | peak RSS MiB | overhead p50 ms | p90 ms | start-up s | trials span s | tail s |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for (trials, concurrency), processes in ((size, p) for size in sizes for p in args.processes):
            r = run(trials, concurrency, f"n{trials}-c{concurrency}-p{processes}", processes)
            ideal = math.ceil(trials / concurrency) * r["trial_s"]
            wall = r["wall"]
            print(f"| {trials} | {concurrency} | {processes} | {wall:.1f} | {ideal:.1f} | {wall / ideal:.2f} "
                  f"| {(wall - fixed) / ideal:.2f} | {(wall - fixed - ideal) / trials * 1000:.2f} "
                  f"| {r['cpu']:.1f} | {(r['cpu'] - fixed_cpu) / trials * 1000:.2f} | {r['rss'] / 1024:.0f} "
                  f"| {r['p50']:.1f} | {r['p90']:.1f} | {r['startup']:.2f} | {r['span']:.2f} | {r['tail']:.2f} |",
                  flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
