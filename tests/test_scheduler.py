"""The scheduler's failure paths: broken progress output, EMFILE, Ctrl-C twice, SIGHUP, usage and
files across retries, tidy retry lines, the open-files limit, and trials.jsonl's durable appends."""

from __future__ import annotations

import errno
import json
import os
import resource
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agentcompass.core.durable import DurableAppender
from agentcompass.core.lanes import RetryPolicy
from harbor_factory import make_file_tasks, make_recipe

PLUGIN = '''
import os, resource, time
from pathlib import Path
from agentcompass.core.errors import InfraError
from agentcompass.harnesses.oracle import OracleHarness
from agentcompass.core.task import Usage


class BusyHarness(OracleHarness):
    """Busy in Python for a minute, never looking at interrupts."""
    def __init__(self, mark, **_):
        self.mark = Path(mark)

    def run(self, task, sandbox, model, trial, task_format):
        self.mark.touch()
        end = time.monotonic() + 60
        while time.monotonic() < end:
            sum(range(10000))
        return super().run(task, sandbox, model, trial, task_format)


class PayingHarness(OracleHarness):
    """Spends $1 per try; the first `failures` tries of each attempt then lose their sandbox."""
    def __init__(self, failures=1, state=".", **_):
        self.failures, self.state = failures, Path(state)

    def run(self, task, sandbox, model, trial, task_format):
        marker = self.state / f"{task.id}.{trial.attempt}"
        seen = int(marker.read_text()) if marker.exists() else 0
        marker.write_text(str(seen + 1))
        spent = Usage(model_calls=1, tokens_in=100, tokens_out=10, cost_usd=1.0)
        trial.write("trajectory.json", f'{{"try": {seen + 1}}}')
        if seen < self.failures:
            error = InfraError(f"lost the sandbox on try {seen + 1}\\nsecond line of the message")
            error.usage = spent
            raise error
        outcome = super().run(task, sandbox, model, trial, task_format)
        outcome.usage = spent
        return outcome


class LimitsHarness(OracleHarness):
    """Records the open-files limit the run works under."""
    def run(self, task, sandbox, model, trial, task_format):
        trial.write("nofile.txt", str(resource.getrlimit(resource.RLIMIT_NOFILE)[0]))
        return super().run(task, sandbox, model, trial, task_format)
'''

EMFILE_AT_TRIAL_DIRS = '''
import errno, os
_mkdir = os.mkdir
STATE = os.environ["EMFILE_STATE"]


def mkdir(path, *args, **kwargs):
    """EMFILE when creating an attempt dir: t000-t002 the first time, t003 always."""
    name, task = os.path.basename(path), os.path.basename(os.path.dirname(path))
    if name.startswith("attempt-") and task in ("t000", "t001", "t002", "t003") and not os.path.exists(path):
        marker = os.path.join(STATE, task)
        seen = int(open(marker).read()) if os.path.exists(marker) else 0
        open(marker, "w").write(str(seen + 1))
        if task == "t003" or seen == 0:
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
    return _mkdir(path, *args, **kwargs)


os.mkdir = mkdir
'''


def setup(tmp_path: Path, count: int, harness: str = "", sleep: float = 0.0) -> tuple[list[str], dict[str, str], Path]:
    """Tasks, a recipe, optional harness YAML; returns argv, env and the run dir."""
    plugins = tmp_path / "plugins"
    plugins.mkdir(exist_ok=True)
    (plugins / "sched_plugins.py").write_text(PLUGIN)
    conf = tmp_path / "conf"
    make_file_tasks(tmp_path / "data", count, solve_extra=f"sleep {sleep}" if sleep else "")
    make_recipe(conf, "tiny", tmp_path / "data")
    name = "oracle"
    if harness:
        name = harness.partition("\n")[0].removeprefix("name: ")
        (conf / "harnesses").mkdir(exist_ok=True)
        (conf / "harnesses" / f"{name}.yaml").write_text(harness)
    argv = [sys.executable, "-m", "agentcompass", "run", "tiny", name, "none", "--config-dir", str(conf),
            "--results-dir", str(tmp_path / "r"), "--run-name", "x", "--env-params",
            json.dumps({"isolation": "none", "root": str(tmp_path / "ws")})]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(plugins), os.environ.get("PYTHONPATH")]))}
    env.pop("AGENTCOMPASS_DEBUG", None)
    return argv, env, tmp_path / "r" / "x" / f"tiny__{name}__none__local"


def processes_running(marker: str) -> list[int]:
    """Processes whose command line names `marker` (a test's own tmp dir): a run and its workers."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as handle:
                    if marker.encode() in handle.read():
                        found.append(int(entry.name))
            except OSError:
                continue
    return found


def trials_of(run_dir: Path) -> dict[str, dict]:
    return {t["task_id"]: t for t in map(json.loads, (run_dir / "trials.jsonl").read_text().splitlines())}


def status_of(run_dir: Path) -> str:
    return json.loads((run_dir / "run.json").read_text())["status"]


@pytest.mark.parametrize("processes", [1, 2])
def test_a_run_piped_into_head_finishes_every_trial(tmp_path, processes):
    argv, env, run_dir = setup(tmp_path, 8, sleep=0.2)
    command = " ".join(map(shlex.quote, argv)) + f" --task-concurrency 2 run.processes={processes} 2>&1 | head -1; exit ${{PIPESTATUS[0]}}"
    result = subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(result.stdout.splitlines()) == 1
    assert len(trials_of(run_dir)) == 8 and status_of(run_dir) == "completed"


@pytest.mark.parametrize("processes", [1, 2])
def test_emfile_at_trial_dir_creation_is_a_recorded_infra_error(tmp_path, processes):
    argv, env, run_dir = setup(tmp_path, 6)
    (tmp_path / "emfile").mkdir()
    (tmp_path / "emfile" / "sitecustomize.py").write_text(EMFILE_AT_TRIAL_DIRS)
    (tmp_path / "state").mkdir()
    env = {**env, "PYTHONPATH": f"{tmp_path / 'emfile'}{os.pathsep}{env['PYTHONPATH']}",
           "EMFILE_STATE": str(tmp_path / "state")}
    result = subprocess.run([*argv, "--task-concurrency", "6", "--max-retries", "1", "run.retry_backoff_s=0.01",
                             f"run.processes={processes}"],
                            env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    trials = trials_of(run_dir)
    assert len(trials) == 6 and status_of(run_dir) == "completed"
    assert [trials[t]["retries"] for t in ("t000", "t001", "t002")] == [1, 1, 1]
    assert all(trials[t]["status"] == "passed" for t in ("t000", "t001", "t002", "t004", "t005"))
    assert trials["t003"]["status"] == "error" and trials["t003"]["error_category"] == "infra"
    assert "Too many open files" in trials["t003"]["message"]
    assert list((tmp_path / "ws").iterdir()) == []  # no workspace leaked


@pytest.mark.parametrize("processes", [1, 2])
def test_a_worker_failing_outside_any_trial_ends_the_run_failed(tmp_path, processes):
    argv, env, run_dir = setup(tmp_path, 4)
    (run_dir / "trials.jsonl").mkdir(parents=True)  # every append fails: EISDIR
    result = subprocess.run([*argv, "--task-concurrency", "2", f"run.processes={processes}"], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: run failed: ") and "trials.jsonl" in last and "Is a directory" in last
    assert status_of(run_dir) == "failed"
    assert list((tmp_path / "ws").iterdir()) == []


@pytest.mark.parametrize("processes", [1, 2])
@pytest.mark.parametrize("signals", [[signal.SIGINT], [signal.SIGINT, signal.SIGINT], [signal.SIGHUP]])
def test_interrupt_of_a_harness_busy_in_python_exits_in_seconds(tmp_path, signals, processes):
    """With worker processes, the signal reaches the parent alone (as `kill` sends it): it forwards it."""
    mark = tmp_path / "busy"
    argv, env, run_dir = setup(tmp_path, 2, harness=f"name: busy\nimpl: sched_plugins:BusyHarness\nmark: {mark}\n")
    proc = subprocess.Popen([*argv, "--task-concurrency", "2", f"run.processes={processes}"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not mark.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert mark.exists(), "the harness never started"
    for i, sig in enumerate(signals):
        if i:
            time.sleep(0.5)  # the first one has started the wind-down
        proc.send_signal(sig)
        sent = time.monotonic()
    _, stderr = proc.communicate(timeout=90)
    waited = time.monotonic() - sent
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr
    # One signal: sandboxes closed, then at most the grace period (GRACE_S, 5 s) for the busy workers, never the
    # harness's minute. A second signal: at once, not the rest of the grace period (4.5 s more).
    assert waited < (4 if len(signals) == 2 else 30), waited
    assert status_of(run_dir) == "interrupted"
    assert list((tmp_path / "ws").iterdir()) == []
    assert processes_running(str(tmp_path)) == []  # the worker processes went with the run


@pytest.mark.parametrize("processes", [1, 2])
@pytest.mark.parametrize("failures,status,cost", [(1, "passed", 2.0), (3, "error", 3.0)])
def test_usage_and_files_of_failed_tries_are_kept(tmp_path, failures, status, cost, processes):
    harness = f"name: paying\nimpl: sched_plugins:PayingHarness\nfailures: {failures}\nstate: {tmp_path}\n"
    argv, env, run_dir = setup(tmp_path, processes, harness=harness)  # a task per process
    result = subprocess.run([*argv, "--max-retries", "2", "run.retry_backoff_s=0.01", f"run.processes={processes}"], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    trial = trials_of(run_dir)["t000"]
    assert trial["status"] == status and trial["retries"] == min(failures, 2)
    assert trial["usage"]["cost_usd"] == cost and trial["usage"]["model_calls"] == cost
    attempt = run_dir / "tasks" / "t000" / "attempt-1"
    tries = int(cost)
    for n in range(1, tries):
        assert json.loads((attempt / f"try-{n}" / "trajectory.json").read_text()) == {"try": n}
    assert json.loads((attempt / "trajectory.json").read_text()) == {"try": tries}
    assert json.loads(Path(tmp_path / "r" / "x").joinpath(run_dir.name, "summary.json").read_text())["cost_usd"] \
        == cost * processes
    # Progress: one tidy line per retry with the reason's first line, no raw log lines.
    assert "t000 attempt 1: infra error, retry 1/2 in " in result.stderr
    assert "lost the sandbox on try 1" in result.stderr and "second line" not in result.stderr
    assert "[warning" not in result.stderr
    if status == "error":
        assert "t000 attempt 1: error (infra) (" in result.stderr and "): lost the sandbox on try 3" in result.stderr


def test_soft_open_files_limit_is_raised_to_the_hard_one(tmp_path):
    argv, env, run_dir = setup(tmp_path, 1, harness="name: limits\nimpl: sched_plugins:LimitsHarness\n")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= 256:
        pytest.skip("the hard open-files limit is too low to lower the soft one below it")
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120,
                            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard)))
    assert result.returncode == 0, result.stderr
    raised = int((run_dir / "tasks" / "t000" / "attempt-1" / "nofile.txt").read_text())
    assert raised == (hard if hard != resource.RLIM_INFINITY else raised) and raised > 256


def test_backoff_is_capped_and_jittered():
    policy = RetryPolicy(max_retries=10, backoff_s=2.0)
    late = [policy.delay(10) for _ in range(50)]  # uncapped, the 10th retry would wait 1,024 s
    assert all(30 <= d <= 60 for d in late) and len(set(late)) > 1
    assert all(1 <= policy.delay(1) <= 2 for _ in range(20))


def test_concurrent_appends_land_whole_and_short_writes_continue(tmp_path, monkeypatch):
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real_write(fd, bytes(data[:7])))  # at most 7 bytes per call
    appender = DurableAppender(tmp_path / "trials.jsonl")
    lines = [json.dumps({"n": i, "pad": "x" * (i % 50)}) + "\n" for i in range(400)]
    threads = [threading.Thread(target=appender.append, args=(line.encode(),)) for line in lines]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted((tmp_path / "trials.jsonl").read_text().splitlines(keepends=True)) == sorted(lines)


def test_a_failed_append_raises_and_leaves_no_torn_line(tmp_path, monkeypatch):
    path = tmp_path / "trials.jsonl"
    appender = DurableAppender(path)
    appender.append(b'{"n": 1}\n')
    real_write = os.write
    calls = []

    def full_disk(fd, data):
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, bytes(data[:3]))  # a short write, then the disk is full
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", full_disk)
    with pytest.raises(OSError, match="No space left"):
        appender.append(b'{"n": 2}\n')
    monkeypatch.setattr(os, "write", real_write)
    appender.append(b'{"n": 3}\n')
    assert path.read_text() == '{"n": 1}\n{"n": 3}\n'


class SleepingRunner:
    """A trial that only waits, noting when it started: what spreads its starts is the scheduler alone."""

    gateway, keep_environment = None, False
    provider = type("Provider", (), {"name": "waits", "fork_safe": False})()

    def __init__(self) -> None:
        from agentcompass.core.pacing import Pacer
        from agentcompass.core.trial import OpenSandboxes
        self.pacer, self.sandboxes, self.starts, self.ends = Pacer(), OpenSandboxes(), [], []
        self.seconds = 0.3

    def run(self, task, attempt, trial_dir):
        from agentcompass.core.results import TrialResult, now_iso
        self.starts.append(time.monotonic())
        time.sleep(self.seconds)
        self.ends.append(time.monotonic())
        return TrialResult(task_id=task.id, attempt=attempt, status="passed", started_at=now_iso(), finished_at=now_iso())


def test_first_trials_start_spaced_apart_then_keep_their_pace(tmp_path, monkeypatch):
    # Trials finishing together share one fsync (the store's group commit) and start their next together:
    # on a disk a docker build keeps busy that bunches them by the disk's pace. Only the scheduler's is checked.
    monkeypatch.setattr(os, "fsync", lambda fd: None)
    from agentcompass.core.progress import Progress
    from agentcompass.core.results import ResultsStore
    from agentcompass.core.lanes import Lane
    from agentcompass.core.scheduler import START_SPACING_S, Scheduler
    from agentcompass.core.task import Task

    threads = 120
    runner = SleepingRunner()
    runner.seconds = 1.5  # far longer than the first round takes to start, even on a machine 4x as busy
    store = ResultsStore(tmp_path / "run")
    lane = Lane(runner, store, RetryPolicy(0, 0), [(Task(id=f"t{i:03d}", instruction=""), 1) for i in range(2 * threads)])
    Scheduler([lane], threads, Progress(2 * threads), processes=1).run()
    starts = sorted(runner.starts)
    assert len(starts) == 2 * threads and len(store.recorded()) == 2 * threads
    first, second = starts[:threads], starts[threads:]
    assert START_SPACING_S >= 0.0005  # half a millisecond or so per thread: 120 threads start over about 60 ms
    # Each thread's first start waits its turn: spread over about (threads - 1) spacings, not bunched.
    assert first[-1] - first[0] >= 0.04
    assert first[-1] - first[0] < 1.2  # and all of the first round starts before any trial could end
    # The second round starts as the first ends, trial by trial: as spread as the first round's ends (which
    # a busy machine may bunch by waking the sleepers together; the scheduler must not bunch them further).
    ends = sorted(runner.ends)[:threads]
    assert second[-1] - second[0] >= 0.5 * (ends[-1] - ends[0])


def test_an_interrupt_during_the_first_round_spacing_starts_nothing_more(tmp_path, monkeypatch):
    from agentcompass.core import scheduler as scheduling
    from agentcompass.core.progress import Progress
    from agentcompass.core.results import ResultsStore
    from agentcompass.core.lanes import Lane
    from agentcompass.core.scheduler import Scheduler
    from agentcompass.core.signals import Interrupted
    from agentcompass.core.task import Task

    # Turns 20 ms apart: the last of 600 threads would start 12 s in, so a wait that ignored the interrupt
    # is told from a busy machine's slowness (the run ends within a few seconds of it either way).
    monkeypatch.setattr(scheduling, "START_SPACING_S", 0.02)
    runner = SleepingRunner()
    lane = Lane(runner, ResultsStore(tmp_path / "run"), RetryPolicy(0, 0),
                [(Task(id=f"t{i:04d}", instruction=""), 1) for i in range(600)])
    scheduler = Scheduler([lane], 600, Progress(600), processes=1)
    threading.Timer(0.6, lambda: signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)).start()
    t0 = time.monotonic()
    with pytest.raises(Interrupted):
        scheduler.run()
    assert time.monotonic() - t0 < 8  # the threads still waiting for their turn stopped waiting (not 12 s)
    assert len(runner.starts) < 150  # and the ones whose turn had not come never started (turn 150: 3 s in)
