"""What a Harbor trial takes from the agent's sandbox once the agent is done, as Harbor 0.26 does it
(trial.py `_collect_artifacts_phased`): the `[[verifier.collect]]` hooks of the main service, then main's
artifacts, then (main stopped first where a separate verifier grades) the sidecars' hooks and artifacts. A hook that fails or times out is logged and
collection goes on; the verifier then grades what was collected (DeepSWE's verifier grades a missing
model.patch as "no model.patch submitted").
"""

from __future__ import annotations

import fnmatch
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentcompass.core.errors import InfraError

if TYPE_CHECKING:
    from agentcompass.core.sandbox import Sandbox
    from agentcompass.core.task import Task
    from agentcompass.core.context import TrialContext

MAIN = "main"  # the agent's service in a task's docker-compose.yaml
ARTIFACTS_DIR = "/logs/artifacts"  # copied to a separate verifier, as Harbor does
COLLECT_LOG = "collect.log"


def collect_all(task: "Task", sandbox: "Sandbox", trial: "TrialContext") -> dict[str, Any]:
    """Run the hooks and download the artifacts, main first; what happened, for the trial's details:
    {"hooks": [{service, command, exit_code, timed_out, error}], "missing": [declared artifacts not found]}."""
    hooks: list[dict[str, Any]] = task.data.get("collect", [])
    artifacts: list[dict[str, Any]] = task.data["artifacts"]
    ran: list[dict[str, Any]] = []
    missing: list[str] = []
    # A step's pass lands in steps/NAME/artifacts, as Harbor keeps each step's.
    base = trial.dir.joinpath("steps", task.data["step"], "artifacts") if task.data.get("step") else trial.dir / "artifacts"
    for sidecars in (False, True):
        if sidecars and task.data["environment_mode"] == "separate" and not task.data.get("step") \
                and any(item["service"] != MAIN for item in [*hooks, *artifacts]):
            stop = getattr(sandbox, "stop_client", None)  # compose (docker): main has no further use, as in Harbor
            if stop is not None:
                stop()
        for hook in hooks:
            if (hook["service"] != MAIN) == sidecars:
                ran.append(run_hook(hook, sandbox, trial))
        pulls = [(MAIN, ARTIFACTS_DIR, [])] if not sidecars else []
        pulls += [(a["service"], a["source"], a["exclude"]) for a in artifacts if (a["service"] != MAIN) == sidecars]
        for service, path, exclude in pulls:
            local = base.joinpath(path.lstrip("/"))  # one join, parsing only the new parts
            try:
                if service == MAIN:
                    refused = sandbox.download(path, local)
                else:
                    refused = sandbox.download_from_service(service, path, local)  # type: ignore[attr-defined]  # compose: docker
            except FileNotFoundError:
                if path != ARTIFACTS_DIR:
                    missing.append(path if service == MAIN else f"{service}:{path}")
                continue
            # A link out of the artifacts (to a host file, or the sandbox's own) is never copied: the agent made it,
            # so the attempt is failed with it as evidence, not retried as an infra error nor left out of the rate.
            for evidence in refused or []:
                trial.mark_tampered(evidence if service == MAIN else f"{service}:{evidence}")
            if path == ARTIFACTS_DIR and local.is_dir() and not any(local.iterdir()):
                for empty in (local, local.parent, local.parent.parent):  # the empty /logs/artifacts every agent has
                    if empty == trial.dir or any(empty.iterdir()):
                        break
                    empty.rmdir()
                continue
            if exclude:
                drop_excluded(local, exclude)
    return {"hooks": ran, "missing": missing} if ran or missing else {}


def run_hook(hook: dict[str, Any], sandbox: "Sandbox", trial: "TrialContext") -> dict[str, Any]:
    """One hook, best effort as in Harbor: its outcome is logged (collect.log) and never ends the trial
    (an infra failure of the sandbox itself still does, as for any command)."""
    service, command, timeout = hook["service"], hook["command"], hook["timeout_sec"]
    record: dict[str, Any] = {"service": service, "command": command}
    try:
        if service == MAIN:
            result = sandbox.exec(command, timeout=timeout, user=hook["user"])
        else:
            result = sandbox.exec_in_service(service, command, timeout=timeout, user=hook["user"])  # type: ignore[attr-defined]
    except InfraError:
        raise
    except Exception as exc:  # as Harbor: a hook that cannot even start is a warning, not the trial's end
        record["error"] = f"{type(exc).__name__}: {exc}"
        trial.append(COLLECT_LOG, f"$ [{service}] {command}\n{record['error']}\n")
        return record
    record.update(exit_code=result.exit_code, timed_out=result.timed_out)
    status = f"timed out after {timeout:g}s" if result.timed_out else f"exit {result.exit_code}"
    trial.append(COLLECT_LOG, f"$ [{service}] {command}\n{result.stdout}{result.stderr}[{status}]\n")
    return record


def hook_failures(collected: dict[str, Any]) -> list[str]:
    """One phrase per hook that did not succeed: what validate reports instead of "oracle failed"."""
    failures = []
    for hook in collected.get("hooks", []):
        if hook.get("error"):
            why = hook["error"]
        elif hook.get("timed_out"):
            why = "timed out"
        elif hook.get("exit_code"):
            why = f"exit {hook['exit_code']}"
        else:
            continue
        failures.append(f"collect hook in {hook['service']} ({hook['command'][:60]}) {why}")
    return failures


def drop_excluded(local: Path, patterns: list[str]) -> None:
    """tar --exclude semantics on a downloaded directory: a pattern matches any trailing part of an entry's
    path (`*.pyc`, `node_modules`, `build/tmp`), and a matching directory goes with all it holds."""
    if not local.is_dir():
        return
    for root, dirs, files in os.walk(local):
        base = Path(root).relative_to(local).parts
        for name in [*dirs, *files]:
            parts = (*base, name)
            tails = ("/".join(parts[i:]) for i in range(len(parts)))
            if any(fnmatch.fnmatchcase(tail, pattern) for tail in tails for pattern in patterns):
                target = Path(root) / name
                if name in dirs:
                    dirs.remove(name)
                    shutil.rmtree(target, ignore_errors=True)
                else:
                    target.unlink(missing_ok=True)
