"""How long each refusal before a run takes: bad input must be one line, exit 2, within 2 s of CPU.

Each case runs the CLI as a user types it, in a fresh directory, `--repeats` times; the table gives
the median and the worst wall time, the median CPU (user + system: on a busy machine it moves far
less than the wall), whether the exit code was 2 with one line on stderr, and the median as a ratio
to `agentcompass --help` in the same run (load on the machine moves both alike). A case passes with
its worst CPU under 2 s: on this project's busy 2-core machine the wall also counts the waits for a core. Cases that need
litellm's world (a model-driven harness) must not pay its import (seconds): a key a local server
rejects (401), an endpoint nothing listens on, in a pooled sweep too. The last rows are not
refusals but answers a user waits for: `report` on a small run that used no model (exit 0).

    python benchmarks/refusals.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
AGENTCOMPASS = [sys.executable, "-m", "agentcompass"]
LIMIT_S = 2.0
# This checkout's code (not whatever agentcompass is installed), with compiled bytecode as an installed package
# has it (PYTHONPYCACHEPREFIX, set per run in main; the first --help compiles it).
BASE_ENV = {**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
MODEL_RUN = ["run", "demo", "mini_swe_agent", "gpt-5-mini", "--run-name", "taken"]


def no_bwrap_path(scratch: Path) -> str:
    """A PATH with every command of /usr/bin but bubblewrap."""
    farm = scratch / "no-bwrap-bin"
    if not farm.exists():
        farm.mkdir()
        for entry in Path("/usr/bin").iterdir():
            if entry.name != "bwrap":
                (farm / entry.name).symlink_to(entry)
    return str(farm)


def cases(scratch: Path, rejecting_url: str) -> list[tuple[str, list[str], dict[str, str]]]:
    from dead_endpoints import refusing_endpoint

    key = {"OPENAI_API_KEY": "sk-not-a-real-key"}
    local_model = ["run", "demo", "mini_swe_agent", "openai/local-model", "--model-api-key", "sk-wrong"]
    return [
        ("unknown benchmark", ["run", "demoo", "oracle", "none"], {}),
        ("typo in a benchmark param", ["run", "demo", "oracle", "none", "--benchmark-params", '{"limt": 1}'], {}),
        ("limit 0", ["run", "demo", "oracle", "none", "--benchmark-params", '{"limit": 0}'], {}),
        ("unknown sample_id", ["run", "demo", "oracle", "none", "--benchmark-params", '{"sample_ids": ["fix-median"]}'], {}),
        ("unknown oracle key", ["run", "demo", "oracle", "none", "harness.descripton=x"], {}),
        ("bad JSON", ["run", "demo", "oracle", "none", "--env-params", "{isolation: none}"], {}),
        ("missing model key", ["run", "demo", "mini_swe_agent", "gpt-5-mini"], {"OPENAI_API_KEY": ""}),
        ("run name in use (model harness)", MODEL_RUN, key),
        ("run name holds other settings (model harness)", [*MODEL_RUN[:-1], "other"], key),
        ("model harness on local without bubblewrap", ["run", "demo", "mini_swe_agent", "gpt-5-mini"],
         {**key, "PATH": no_bwrap_path(scratch)}),
        ("git source offline", ["list", "tasks", "terminal_bench_head"], {"HTTPS_PROXY": "http://127.0.0.1:9",
                                                                         "AGENTCOMPASS_CACHE_DIR": str(scratch / "cache")}),
        ("list tasks: unknown benchmark", ["list", "tasks", "swebench_verifed"], {}),
        ("model preflight: a local server rejects the key (401)", [*local_model, "--model-base-url", rejecting_url], {}),
        ("model preflight: unreachable endpoint, pooled sweep",
         [*local_model, "--model-base-url", refusing_endpoint(), "-m", "run.k=1,2", "--sweep-parallel"], {}),
    ]


ANSWERS = [("report on a small run without a model", ["report", "results/other/demo__nop__none__local"])]  # exit 0, not a refusal


def timed(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float, int, int]:
    """Wall and CPU (user + system) seconds of one command, its exit code and its stderr's line count."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    done = subprocess.run([*AGENTCOMPASS, *argv], cwd=cwd, env={**BASE_ENV, **env}, capture_output=True, text=True)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.returncode, len([line for line in done.stderr.splitlines() if line.strip()])


def prepare(scratch: Path) -> subprocess.Popen[bytes]:
    """results/taken: a run of other settings, its directory held by a live process (as a running run holds it)."""
    from agentcompass.core.runlock import RunLock

    ran = subprocess.run([*AGENTCOMPASS, "run", "demo", "nop", "none", "--run-name", "other",
                          "--benchmark-params", '{"limit": 1}'], cwd=scratch, capture_output=True, text=True, env=BASE_ENV)
    if ran.returncode != 0:
        raise SystemExit(ran.stderr)
    (scratch / "results" / "other" / "demo__mini_swe_agent__gpt-5-mini__local").mkdir(parents=True)
    shutil.copy(scratch / "results" / "other" / "demo__nop__none__local" / "run.json",
                scratch / "results" / "other" / "demo__mini_swe_agent__gpt-5-mini__local" / "run.json")
    held = scratch / "results" / "taken" / "demo__mini_swe_agent__gpt-5-mini__local"
    held.mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; sys.path.insert(0, sys.argv[2]);"
                               "from agentcompass.core.runlock import RunLock; from pathlib import Path;"
                               "lock = RunLock(Path(sys.argv[1])).__enter__(); print('held', flush=True); time.sleep(3600)",
                               str(held), str(REPO)], stdout=subprocess.PIPE)
    assert holder.stdout is not None and holder.stdout.readline().strip() == b"held"
    del RunLock
    return holder


def main() -> None:
    from fake_llm_server import FakeLLM, FakeLLMServer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    slow: list[str] = []
    with tempfile.TemporaryDirectory(prefix="agentcompass-refusals-") as tmp, \
            FakeLLMServer(FakeLLM([], api_key="the-right-key")) as rejecting:
        scratch = Path(tmp)
        BASE_ENV["PYTHONPYCACHEPREFIX"] = str(scratch / "pycache")
        holder = prepare(scratch)
        try:
            help_s = statistics.median(timed(["--help"], scratch, {})[0] for _ in range(args.repeats))
            print(f"# {time.strftime('%Y-%m-%d %H:%M')}, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores, "
                  f"`agentcompass --help` median {help_s:.2f} s")
            print("| refusal | median s | max s | CPU s | exit 2, one line | / --help | CPU under 2 s |")
            print("|---|---|---|---|---|---|---|")
            rows = [(name, argv, env, 2) for name, argv, env in cases(scratch, rejecting.base_url)]
            rows += [(name, argv, {}, 0) for name, argv in ANSWERS]
            for name, argv, env, expected in rows:
                runs = [timed(argv, scratch, env) for _ in range(args.repeats)]
                walls = [wall for wall, _, _, _ in runs]
                cpu = statistics.median(c for _, c, _, _ in runs)
                worst_cpu = max(c for _, c, _, _ in runs)
                shaped = all(code == expected and (expected == 0 or lines == 1) for _, _, code, lines in runs)
                median = statistics.median(walls)
                if worst_cpu >= LIMIT_S or not shaped:
                    slow.append(name)
                shape = ("yes" if shaped else "NO") if expected == 2 else ("exit 0" if shaped else "NO (exit)")
                print(f"| {name} | {median:.2f} | {max(walls):.2f} | {cpu:.2f} | {shape} | "
                      f"{median / help_s:.1f} | {'yes' if worst_cpu < LIMIT_S else 'NO'} |", flush=True)
        finally:
            holder.kill()
            holder.wait()
    print(json.dumps({"failed": slow}))
    sys.exit(1 if slow else 0)


if __name__ == "__main__":
    main()
