"""What a failing agent left behind in its sandbox, asked only once something has already failed.

An agent that is about to fail could turn its failure into a non-attempt: clog the sandbox after its turn so
that the runner's next command fails (an infra error, retried and paid again), or erase, block or kill the
verifier so there is no valid reward (left out of a Harbor mean). Two questions tell such an attempt apart
from a real outage or an honest task's broken verifier, and both are asked on the failure path only, so an
honest run pays nothing for them:

- `unusable`: can the sandbox still run a trivial command that writes a file? A fork bomb, a full disk or a
  killed shell says no. The engine answering (the sandbox is not lost) but the sandbox not running a command
  is the state the agent left, not the infrastructure.
- `foreign_processes`: which processes still run in the sandbox besides its init, its keep-alive and this
  question itself? In the shared verifier mode the agent's processes run beside the verifier; one of them
  could have erased the reward or killed the tests. Asked only where PID 1 is agentcompass's own keep-alive,
  so that nothing the image or the platform started is taken for the agent's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog

from agentcompass.core.errors import AgentSpoiledSandboxError, BackPressure, SandboxLost, TaskRefused, TrialError

if TYPE_CHECKING:
    from agentcompass.core.sandbox import Sandbox

log = structlog.get_logger("agentcompass")
PROBE_TIMEOUT_S = 30.0
PROBE_MARK = "AGENTCOMPASS_LEFTOVER_PROBE"
# A command that must succeed in any working sandbox: a fork, a file written and removed in /tmp. Under /bin/sh, which
# fails a fork at once where bash retries it for half a minute.
PROBE = """exec /bin/sh -c 'f=/tmp/.agentcompass-probe-$$ && echo ok > "$f" && [ -s "$f" ] && rm -f "$f" && echo usable'"""
# Every live process but PID 1, one keep-alive `sleep` child of it, and this script's own (started with the mark
# in their environment, which is what /proc shows, not a later export):
# "pid command line" per line. Zombies and kernel threads are no processes that can act.
LIST_FOREIGN = (
    # Only where PID 1 is agentcompass's keep-alive (docker, gcp): elsewhere (an image's own init, a platform's) what
    # else runs there is not known to be the agent's, and nothing is listed.
    'case "$(tr "\\0" " " < /proc/1/cmdline 2>/dev/null)" in *"sleep 3600"*) ;; *) exit 0 ;; esac; '
    "keep=; "
    'for d in /proc/[0-9]*; do p=${d#/proc/}; [ "$p" = 1 ] && continue; '
    f'tr "\\0" "\\n" < "$d/environ" 2>/dev/null | grep -qx "{PROBE_MARK}=1" && continue; '
    'st=$(cat "$d/status" 2>/dev/null) || continue; '
    'printf "%s\\n" "$st" | grep -qE "^State:.[ZX]" && continue; '
    'pp=$(printf "%s\\n" "$st" | sed -n "s/^PPid:[[:space:]]*//p"); [ "$pp" = 2 ] && continue; '
    'cmd=$(tr "\\0" " " < "$d/cmdline" 2>/dev/null); '
    'if [ -z "$keep" ] && [ "$pp" = 1 ] && [ "$cmd" = "sleep 3600 " ]; then keep=1; continue; fi; '
    'echo "$p ${cmd:-[$(sed -n "s/^Name:[[:space:]]*//p" "$d/status")]}"; done; true'
)


def unusable(sandbox: "Sandbox") -> str | None:
    """Why the sandbox cannot run a trivial command any more (timed out, failed, refused), None when it can.
    A lost sandbox (the engine says it is gone) raises SandboxLost: that is the infrastructure's."""
    try:
        result = sandbox.exec(PROBE, timeout=PROBE_TIMEOUT_S, user="root")
    except SandboxLost:
        raise
    except TrialError as exc:
        return f"a trivial command could not start in the sandbox: {str(exc)[:200]}"
    if result.timed_out:
        return f"a trivial command did not finish in the sandbox within {PROBE_TIMEOUT_S:.0f} s"
    if result.exit_code != 0 or "usable" not in result.stdout:
        return (f"a trivial command that writes a file in /tmp failed in the sandbox (exit {result.exit_code}: "
                f"{(result.stderr or result.stdout).strip()[-200:]})")
    return None


def foreign_processes(sandbox: "Sandbox") -> list[str]:
    """The processes still running in the sandbox that neither its init nor its keep-alive are ("pid command").
    Only for sandboxes with a process namespace of their own: the local provider's share the host's."""
    if callable(getattr(sandbox, "host_path", None)):
        return []
    try:
        result = sandbox.exec(LIST_FOREIGN, timeout=PROBE_TIMEOUT_S, user="root", env={PROBE_MARK: "1"})
    except TrialError:
        return []
    return [line.strip() for line in result.stdout.splitlines() if line.strip()][:20]


def spoiled(error: TrialError, sandbox: "Sandbox", task_id: str, attempt: int) -> AgentSpoiledSandboxError | None:
    """An AgentSpoiledSandboxError when what the agent left in `sandbox` (the one it worked in) could have caused
    `error`: an infra error while the sandbox can no longer run a command, or a verifier error without a valid
    reward while the sandbox cannot run a command, something killed the tests, or the agent's processes still ran
    beside the verifier. None otherwise: the error keeps its own row of the table."""
    if isinstance(error, (SandboxLost, BackPressure, TaskRefused)) or getattr(error, "fatal", False):
        return None  # the engine says the sandbox is gone, or a quota: the infrastructure's
    if error.category not in ("infra", "verifier"):
        return None
    try:
        evidence = unusable(sandbox)
        if evidence is None and error.category == "verifier":
            code = getattr(error, "exit_code", None)
            if code is not None and 128 < code < 160:
                evidence = f"the tests were killed by signal {code - 128}, which the runner did not send"
            elif running := foreign_processes(sandbox):
                evidence = "the agent's processes still ran beside the verifier: " + "; ".join(running)
    except SandboxLost:
        return None
    if evidence is None:
        return None
    found = AgentSpoiledSandboxError(f"{error} -- and what the agent left could have caused it: {evidence}")
    found.usage = error.usage
    log.info("a failure the agent could have caused is its failed attempt", task=task_id, attempt=attempt,
             error=str(error)[:200], evidence=evidence[:300])
    return found
