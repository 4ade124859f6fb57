"""What a Harbor trial does in the sandbox around the agent, for single- and multi-step tasks alike: seed the
workdir where no image was built, make /logs writable for the task's users, wait for the healthcheck, put the
sandbox on a phase's network, and run commands as the task's [agent] user."""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentcompass.core.errors import InfraError
from agentcompass.core.task import Task
from agentcompass.formats.harbor.collect import ARTIFACTS_DIR
from agentcompass.formats.harbor.rewards import VERIFIER_DIR

if TYPE_CHECKING:
    from agentcompass.core.sandbox import Sandbox
    from agentcompass.core.context import TrialContext

SETUP_SCRIPT = ".setup.sh"  # in environment/workspace: what the Dockerfile RUNs, for hosts without a build


def seed_workdir(task: Task, sandbox: "Sandbox", trial: "TrialContext") -> None:
    """Where no image was built, do what the Dockerfile does: seed the workdir from environment/workspace, run
    its setup script."""
    if getattr(sandbox, "has_task_image", False) or task.seed_dir is None:
        return
    sandbox.upload(task.seed_dir, task.workdir)
    if (task.seed_dir / SETUP_SCRIPT).is_file():
        result = sandbox.exec(f"bash {SETUP_SCRIPT} && rm -f {SETUP_SCRIPT}", timeout=task.build_timeout_s or 600)
        trial.write("setup.log", result.stdout + result.stderr)
        if not result.ok:
            raise InfraError(f"task setup failed (exit {result.exit_code}); see setup.log")


def as_user(sandbox: "Sandbox", user: str | None) -> "Sandbox":
    return RunAs(sandbox, user) if user else sandbox


class RunAs:
    """The sandbox as the agent sees it: commands run as the task's [agent] user unless told otherwise."""

    def __init__(self, inner: "Sandbox", user: str) -> None:
        self.inner, self.user = inner, user

    def exec(self, cmd: str, **kwargs: Any) -> Any:
        kwargs.setdefault("user", self.user)
        return self.inner.exec(cmd, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def open_logs(task: Task, sandbox: "Sandbox") -> None:
    """/logs as Harbor lays it out for the agent, in both verifier modes: /logs/agent, /logs/verifier and
    /logs/artifacts present and writable by every user (Harbor bind-mounts the trial's folders there, made
    777). One upload, not an exec. What the verifier reads is guarded when it runs (rewards.py), not by
    hiding these folders."""
    sandbox.upload(logs_skeleton(), "/logs")


@functools.cache
def logs_skeleton() -> Path:
    """A local /logs with the three folders Harbor mounts, mode 777 (made once per process)."""
    made = tempfile.mkdtemp(prefix="agentcompass-logs-")
    atexit.register(shutil.rmtree, made, True)
    root = Path(made) / "logs"
    for name in ("agent", "verifier", "artifacts"):
        (root / name).mkdir(parents=True)
        (root / name).chmod(0o777)
    root.chmod(0o755)
    return root


def enter_phase(task: Task, sandbox: "Sandbox", phase: str) -> None:
    """The phase's network_mode, where the task's phases differ ([agent], [verifier] over [environment])
    or it has an allowlist (whose hosts are the phase's)."""
    mode = task.data["networks"].get(phase)
    if mode and (len(task.network_modes) > 1 or "allowlist" in task.network_modes):
        hosts = task.data["allowed_hosts"].get(phase, ())
        sandbox.set_network(mode, hosts)  # type: ignore[attr-defined]  # the provider's check made sure it can


def await_healthy(check: dict[str, Any] | None, sandbox: "Sandbox", trial: "TrialContext") -> None:
    """Docker HEALTHCHECK semantics before the agent starts: `retries` consecutive failures after the
    start period end the trial as an infra error (the environment never became ready)."""
    if not check:
        return
    started, failures = time.monotonic(), 0
    while True:
        result = sandbox.exec(check["command"], timeout=check["timeout_sec"])
        trial.append("healthcheck.log", f"$ {check['command']}\nexit {result.exit_code}\n{result.stdout}{result.stderr}")
        if result.ok:
            return
        starting = time.monotonic() - started < check["start_period_sec"]
        failures = 0 if starting else failures + 1
        if failures >= check["retries"]:
            raise InfraError(f"healthcheck failed {failures} times in a row (exit {result.exit_code}); see healthcheck.log")
        if trial.stopping.wait(check["start_interval_sec"] if starting else check["interval_sec"]):
            raise InfraError("interrupted")
