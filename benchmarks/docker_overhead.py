"""agentcompass on --env docker against the raw docker CLI doing the same container work.

Generates N Harbor-format tasks, each with its own tiny Dockerfile FROM the local base image,
warms their images, then times (wall clock, best of --repeat):
  agentcompass: `agentcompass run <generated recipe> oracle none --env docker` at concurrency 4
  floor:        per task, with the docker CLI, 4 tasks at a time: cached build, run, copy solution
                and tests, exec solve, exec tests, read reward, remove
and prints the ratio agentcompass / floor (target: at most 1.25), then agentcompass's peak RSS
at concurrency 16. Needs a Docker engine and agentcompass/base:bookworm (scripts/build-base-image.sh).

    python benchmarks/docker_overhead.py [--tasks 16] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

BASE_IMAGE = "agentcompass/base:bookworm"
CLI_ENV = {**os.environ, "DOCKER_BUILDKIT": "0"}


def make_dataset(root: Path, count: int) -> list[Path]:
    """`count` tasks: the Dockerfile seeds /app/id.txt, the solution copies it, the test checks the copy."""
    tasks = []
    for i in range(count):
        task = root / f"bench-{i:02d}"
        for sub in ("environment", "solution", "tests"):
            (task / sub).mkdir(parents=True, exist_ok=True)
        (task / "task.toml").write_text('version = "1.0"\n[environment]\nworkdir = "/app"\n')
        (task / "instruction.md").write_text("Copy /app/id.txt to /app/answer.txt.\n")
        (task / "environment" / "Dockerfile").write_text(f"FROM {BASE_IMAGE}\nWORKDIR /app\nRUN echo task-{i} > /app/id.txt\n")
        (task / "solution" / "solve.sh").write_text("cp /app/id.txt /app/answer.txt\n")
        (task / "tests" / "test.sh").write_text(
            "mkdir -p /logs/verifier\n"
            f"if [ \"$(cat /app/answer.txt)\" = task-{i} ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n")
        tasks.append(task)
    return tasks


def write_recipe(config_dir: Path, dataset: Path) -> None:
    (config_dir / "recipes").mkdir(parents=True, exist_ok=True)
    (config_dir / "recipes" / "overhead.yaml").write_text(
        f"name: overhead\ndescription: docker overhead benchmark\nformat: harbor\nsource: {{path: {dataset}}}\n")


def agentcompass_argv(config_dir: Path, results: Path, concurrency: int) -> list[str]:
    return [sys.executable, "-m", "agentcompass", "run", "overhead", "oracle", "none", "--env", "docker",
            "--config-dir", str(config_dir), "--results-dir", str(results), "--run-name", uuid.uuid4().hex[:10],
            "--task-concurrency", str(concurrency)]


def run_agentcompass(config_dir: Path, results: Path, concurrency: int) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB) of one run; stops unless every task passed."""
    start = time.monotonic()
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(agentcompass_argv(config_dir, results, concurrency), stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)  # reaps this child alone, with its own rusage
        proc.returncode = os.waitstatus_to_exitcode(status)
        elapsed = time.monotonic() - start
        out.seek(0)
        text = out.read()
    if proc.returncode != 0 or " errors 0" not in text or " failed 0" not in text:
        raise SystemExit(f"agentcompass run failed:\n{text}")
    return elapsed, usage.ru_maxrss


def docker(*args: str) -> str:
    result = subprocess.run(["docker", *args], capture_output=True, text=True, env=CLI_ENV)
    if result.returncode != 0:
        raise SystemExit(f"docker {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout


def floor_trial(task: Path) -> float:
    """The container work of one oracle trial, done with the docker CLI; returns the reward."""
    tag = f"agentcompass-floor/{task.name}:latest"
    name = f"ac-floor-{task.name}-{uuid.uuid4().hex[:6]}"
    docker("build", "-q", "-t", tag, str(task / "environment"))
    docker("run", "-d", "--name", name, "--label", "agentcompass-floor=1", "--entrypoint", "/bin/sh", tag, "-c", "sleep infinity")
    try:
        docker("cp", str(task / "solution"), f"{name}:/solution")
        docker("cp", str(task / "tests"), f"{name}:/tests")
        docker("exec", name, "bash", "/solution/solve.sh")
        docker("exec", name, "bash", "/tests/test.sh")
        return float(docker("exec", name, "cat", "/logs/verifier/reward.txt"))
    finally:
        docker("rm", "-f", name)


def run_floor(tasks: list[Path], concurrency: int) -> float:
    start = time.monotonic()
    with ThreadPoolExecutor(concurrency) as pool:
        rewards = list(pool.map(floor_trial, tasks))
    elapsed = time.monotonic() - start
    if rewards != [1.0] * len(tasks):
        raise SystemExit(f"floor run did not solve every task: {rewards}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=16, help="number of generated tasks (at least 8)")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--rss-concurrency", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each side; the best counts")
    args = parser.parse_args()
    if args.tasks < 8:
        parser.error("--tasks must be at least 8")
    docker("image", "inspect", BASE_IMAGE)
    with tempfile.TemporaryDirectory(prefix="agentcompass-bench-") as tmp:
        root = Path(tmp)
        tasks = make_dataset(root / "dataset", args.tasks)
        write_recipe(root / "conf", root / "dataset")
        results = root / "results"
        print(f"{args.tasks} tasks, concurrency {args.concurrency}; warming images ...", flush=True)
        run_agentcompass(root / "conf", results, args.concurrency)
        run_floor(tasks, args.concurrency)
        ours, floor = [], []
        for _ in range(args.repeat):  # interleaved, so drift in the machine's load hits both sides
            ours.append(run_agentcompass(root / "conf", results, args.concurrency)[0])
            floor.append(run_floor(tasks, args.concurrency))
        best_ours, best_floor = min(ours), min(floor)
        print(f"agentcompass --env docker: {best_ours:.2f}s  (runs: {', '.join(f'{t:.2f}' for t in ours)})")
        print(f"docker CLI floor:          {best_floor:.2f}s  (runs: {', '.join(f'{t:.2f}' for t in floor)})")
        print(f"ratio agentcompass/floor:  {best_ours / best_floor:.2f}  (target <= 1.25)")
        elapsed, peak_kib = run_agentcompass(root / "conf", results, args.rss_concurrency)
        print(f"agentcompass at concurrency {args.rss_concurrency}: {elapsed:.2f}s, peak RSS {peak_kib / 1024:.0f} MiB")
        docker("image", "rm", *(f"agentcompass-floor/{t.name}:latest" for t in tasks))


if __name__ == "__main__":
    main()
