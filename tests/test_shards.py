"""Trials in worker processes (run.processes, agentcompass.core.shards) on the real local provider: every
trial recorded once by the parent, workers that die with it, a worker killed from outside, a fatal
error in one worker stopping all, and the message framing between them."""

from __future__ import annotations

import json
import os
import pickle
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agentcompass.core.shard_pipes import Frames, encode
from agentcompass.core.shard_policy import processes_for
from harbor_factory import make_file_tasks, make_recipe
from test_scheduler import processes_running

PLUGIN = '''
import os, time
from pathlib import Path
from agentcompass.core.errors import FatalInfraError
from agentcompass.harnesses.oracle import OracleHarness


class PidHarness(OracleHarness):
    """Records which process ran the trial (pids/<task>.<attempt>), then solves it after `sleep` seconds;
    task `fatal` (if set) meets an error no trial gets past."""
    def __init__(self, state, sleep=0.0, fatal="", **_):
        self.state, self.sleep, self.fatal = Path(state), float(sleep), fatal

    def run(self, task, sandbox, model, trial, task_format):
        (self.state / f"{task.id}.{trial.attempt}").write_text(str(os.getpid()))
        cores = self.state.parent / "cores"
        cores.mkdir(exist_ok=True)
        (cores / f"{task.id}.{trial.attempt}").write_text(",".join(map(str, sorted(os.sched_getaffinity(0)))))
        if task.id == self.fatal:
            raise FatalInfraError("the account's credentials were rejected (test)")
        time.sleep(self.sleep)
        return super().run(task, sandbox, model, trial, task_format)
'''


def setup(tmp_path: Path, count: int, sleep: float = 0.0, fatal: str = "", solve_extra: str = "",
          ) -> tuple[list[str], dict[str, str], Path]:
    plugins, state, conf = tmp_path / "plugins", tmp_path / "pids", tmp_path / "conf"
    for folder in (plugins, state, conf / "harnesses"):
        folder.mkdir(parents=True)
    (plugins / "shard_plugins.py").write_text(PLUGIN)
    make_file_tasks(tmp_path / "data", count, solve_extra=solve_extra)
    make_recipe(conf, "tiny", tmp_path / "data")
    (conf / "harnesses" / "pids.yaml").write_text(
        f"name: pids\nimpl: shard_plugins:PidHarness\nstate: {state}\nsleep: {sleep}\nfatal: '{fatal}'\n")
    argv = [sys.executable, "-m", "agentcompass", "run", "tiny", "pids", "none", "--config-dir", str(conf),
            "--results-dir", str(tmp_path / "r"), "--run-name", "x", "--env-params",
            json.dumps({"isolation": "none", "root": str(tmp_path / "ws")})]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(plugins), os.environ.get("PYTHONPATH")]))}
    return argv, env, tmp_path / "r" / "x" / "tiny__pids__none__local"


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "trials.jsonl").read_text().splitlines()]


def pids(tmp_path: Path) -> dict[str, int]:
    return {path.name: int(path.read_text()) for path in (tmp_path / "pids").iterdir() if path.read_text()}


def test_trials_run_in_worker_processes_and_the_parent_records_each_once(tmp_path):
    argv, env, run_dir = setup(tmp_path, 12, solve_extra="grep SigIgn /proc/$$/status")  # into agent.log
    proc = subprocess.run([*argv, "--k", "2", "--task-concurrency", "4", "run.processes=2"], env=env,
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    rows = records(run_dir)
    assert sorted((r["task_id"], r["attempt"]) for r in rows) == sorted(
        (f"t{i:03d}", a) for i in range(12) for a in (1, 2))
    assert all(r["status"] == "passed" for r in rows)
    ran_in = set(pids(tmp_path).values())
    assert len(ran_in) == 2, ran_in  # both workers took trials off the shared queue
    for row in rows:  # each trial's result.json: the line the parent recorded
        result = run_dir / "tasks" / row["task_id"] / f"attempt-{row['attempt']}" / "result.json"
        assert json.loads(result.read_text()) == row
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["trials"] == 24 and summary["passed"] == 24
    assert [json.loads(line)["event"] for line in (run_dir / "log.jsonl").read_text().splitlines()][-1] == "run finished"
    assert proc.stderr.count(" attempt ") == 24  # one progress line per trial, printed by the parent
    assert list((tmp_path / "ws").iterdir()) == []  # every worker removed its workspaces before it ended
    masks = [int(path.read_text().split()[1], 16) for path in run_dir.glob("tasks/*/attempt-*/agent.log")]
    assert len(masks) == 24 and not any(mask & (1 << (signal.SIGINT - 1)) for mask in masks)  # commands take Ctrl-C


def test_workers_die_with_a_sigkilled_parent_and_the_rerun_runs_each_trial_once(tmp_path):
    argv, env, run_dir = setup(tmp_path, 10, sleep=0.4)
    args = [*argv, "--k", "2", "--task-concurrency", "4", "run.processes=2"]
    rng = random.Random(os.environ.get("KILL_SEED", "shards"))
    for _ in range(3):
        proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        deadline = time.monotonic() + 60
        while len(pids(tmp_path)) == 0 and proc.poll() is None:
            assert time.monotonic() < deadline, "no trial started"
            time.sleep(0.02)
        time.sleep(rng.uniform(0, 0.6))
        os.kill(proc.pid, signal.SIGKILL)  # the parent alone: its workers must follow
        proc.wait()
        deadline = time.monotonic() + 5
        while processes_running(str(tmp_path / "conf")) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert processes_running(str(tmp_path / "conf")) == [], "a worker outlived its parent"
        for path in (tmp_path / "pids").iterdir():
            path.unlink()
    recorded = len(records(run_dir)) if (run_dir / "trials.jsonl").exists() else 0
    assert recorded < 20, "the kills came too late to interrupt anything"
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    keys = sorted((r["task_id"], r["attempt"]) for r in records(run_dir))
    assert keys == sorted((f"t{i:03d}", a) for i in range(10) for a in (1, 2))  # each exactly once
    assert json.loads((run_dir / "summary.json").read_text())["trials"] == 20


def test_a_worker_killed_from_outside_fails_the_run_and_the_rerun_finishes_it(tmp_path):
    argv, env, run_dir = setup(tmp_path, 8, sleep=2)
    args = [*argv, "--task-concurrency", "4", "run.processes=2"]
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + 60
    while not pids(tmp_path):
        assert time.monotonic() < deadline and proc.poll() is None, "no trial started"
        time.sleep(0.02)
    victim = next(iter(pids(tmp_path).values()))
    assert victim != proc.pid
    os.kill(victim, signal.SIGKILL)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 1, stderr
    assert stderr.strip().splitlines()[-1].startswith("error: run failed: a worker process ended with signal 9 ")
    assert json.loads((run_dir / "run.json").read_text())["status"] == "failed"
    survivor_recorded = len(records(run_dir)) if (run_dir / "trials.jsonl").exists() else 0
    assert survivor_recorded < 8
    result = subprocess.run(args, env=env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr
    assert sorted(r["task_id"] for r in records(run_dir)) == [f"t{i:03d}" for i in range(8)]


def test_a_fatal_error_in_one_worker_stops_every_worker(tmp_path):
    argv, env, run_dir = setup(tmp_path, 40, sleep=0.5, fatal="t002")
    started = time.monotonic()
    proc = subprocess.run([*argv, "--task-concurrency", "4", "run.processes=2"], env=env, capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "error: the account's credentials were rejected (test)"
    assert json.loads((run_dir / "run.json").read_text())["status"] == "stopped"
    assert len(pids(tmp_path)) < 20, "the other worker went on starting trials"
    assert time.monotonic() - started < 60
    assert processes_running(str(tmp_path / "conf")) == []


def test_frames_survive_any_chunking():
    messages = [("result", i, os.urandom(random.randrange(0, 3000))) for i in range(50)]
    stream = b"".join(encode(*message) for message in messages)
    frames, got = Frames(), []
    position = 0
    rng = random.Random(7)
    while position < len(stream):
        step = rng.choice([1, 2, 3, 7, 100, 5000])
        got.extend(frames.feed(stream[position:position + step]))
        position += step
    assert got == messages and not frames.buffer
    assert pickle.loads(stream[4:4 + int.from_bytes(stream[:4], "little")]) == messages[0]


class FakeLane:
    def __init__(self, provider: object) -> None:
        self.runner = type("Runner", (), {"provider": provider, "gateway": None, "keep_environment": False,
                                          "pacer": type("Pacer", (), {"limit": None, "qps": None})()})()


@pytest.mark.parametrize("concurrency,setting,expected", [
    (100, None, 1), (127 * 2, None, 1), (1000, None, 2), (1000, 1, 1), (1000, 3, 3), (2, 8, 2)])
def test_how_many_processes(concurrency, setting, expected, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    forkable = type("Local", (), {"name": "local", "fork_safe": True})()
    assert processes_for([FakeLane(forkable)], concurrency, setting) == expected


def test_a_provider_that_is_not_fork_safe_stays_in_one_process(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    from agentcompass.providers.docker.provider import DockerProvider
    from agentcompass.providers.local.provider import LocalProvider

    assert not getattr(DockerProvider, "fork_safe", False) and LocalProvider.fork_safe
    docker_like = type("Docker", (), {"name": "docker"})()
    assert processes_for([FakeLane(docker_like)], 1000, None) == 1


def test_a_pooled_sweep_in_worker_processes_records_each_job_in_its_own_run(cli, tmp_path):
    result = cli("run", "demo", "oracle", "none", "-m", "run.k=1,2", "--sweep-parallel", "--task-concurrency", "4",
                 "run.processes=2", "--env-params", '{"isolation": "none"}', "--run-name", "s", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    for k in (1, 2):
        run_dir = tmp_path / "results" / "s" / f"demo__oracle__none__local__run.k={k}"
        rows = records(run_dir)
        assert len(rows) == 6 * k and len({(r["task_id"], r["attempt"]) for r in rows}) == 6 * k
        assert all(r["status"] == "passed" for r in rows)
        assert json.loads((run_dir / "summary.json").read_text())["trials"] == 6 * k


def test_a_run_turns_transparent_huge_pages_off_for_itself_and_its_workers():
    probe = ("import os; from agentcompass.commands.cli import no_huge_pages; no_huge_pages(); pid = os.fork()\n"
             "if pid == 0:\n"
             "    print([l for l in open('/proc/self/status') if l.startswith('THP_enabled')][0].split()[1]); os._exit(0)\n"
             "os.waitpid(pid, 0)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "0"  # the forked worker inherits it


def test_results_that_trickle_in_are_recorded_in_a_few_batches(tmp_path):
    """A worker sending 40 results 1 ms apart: the parent records them in a handful of commits (one fsync
    each), not forty, and every one of them once."""
    from agentcompass.core.results import ResultsStore, TrialResult
    from agentcompass.core.shards import Worker, collect

    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the worker's side: one result frame per millisecond; never returns into pytest
        try:
            os.close(read_end)
            for i in range(40):
                result = TrialResult(task_id=f"t{i:03d}", attempt=1, status="passed", started_at="", finished_at="")
                os.write(write_end, encode("result", 0, result.model_dump_json().encode() + b"\n"))
                time.sleep(0.001)
        finally:
            os._exit(0)
    os.close(write_end)
    (tmp_path / "run").mkdir()
    store = ResultsStore(tmp_path / "run")
    batches: list[int] = []
    commit = store.commit
    store.commit = lambda entries: (batches.append(len(entries)), commit(entries))  # type: ignore[method-assign]
    finished: list[str] = []
    lane = type("Lane", (), {"store": store, "fatal": None, "label": "", "failures": [], "pending": []})()
    progress = type("Progress", (), {"finished": lambda self, result, label: finished.append(result.task_id)})()
    scheduler = type("Scheduler", (), {"lanes": [lane], "stopping": threading.Event(), "progress": progress})()
    collect(scheduler, [Worker(pid, read_end, os.open(os.devnull, os.O_WRONLY))])
    assert sorted(finished) == [f"t{i:03d}" for i in range(40)]
    assert sum(batches) == 40 and len(batches) <= 10, batches
    assert len(store.recorded()) == 40


def cpu_list(text: str) -> set[int]:
    """/proc's Cpus_allowed_list ("0-3,6") as a set."""
    cores: set[int] = set()
    for part in text.split(","):
        low, _, high = part.partition("-")
        cores.update(range(int(low), int(high or low) + 1))
    return cores


def test_each_worker_keeps_to_one_core_and_the_commands_it_starts_get_every_core(tmp_path):
    argv, env, run_dir = setup(tmp_path, 8, solve_extra="grep Cpus_allowed_list /proc/$$/status")  # into agent.log
    proc = subprocess.run([*argv, "--task-concurrency", "4", "run.processes=2"], env=env,
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    every = os.sched_getaffinity(0)
    worker_cores: dict[int, set[str]] = {}
    for name, pid in pids(tmp_path).items():
        worker_cores.setdefault(pid, set()).add((tmp_path / "cores" / name).read_text())
    assert len(worker_cores) == 2
    for cores in worker_cores.values():
        assert len(cores) == 1 and len(next(iter(cores)).split(",")) == 1  # one core, for all of a worker's trials
    if len(every) > 1:
        assert len({next(iter(cores)) for cores in worker_cores.values()}) == 2  # and not the same one
    logs = list(run_dir.glob("tasks/*/attempt-*/agent.log"))
    assert len(logs) == 8
    for log in logs:
        assert cpu_list(log.read_text().split()[1]) == every  # the task's command may use every core
