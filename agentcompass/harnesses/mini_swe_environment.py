"""mini-swe-agent's Environment protocol over one of our sandboxes (whatever the provider): a command runs as the
prompt config's interpreter with its env, cwd and timeout, its output reads as mini-swe-agent's text mode reads
it, and an output that starts with the submit line ends the run with what follows it as the submission
(raised as minisweagent's Submitted, which DefaultAgent's loop catches)."""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from agentcompass.core.sandbox import TRUNCATION_MARK, read_whole

if TYPE_CHECKING:
    from agentcompass.core.sandbox import Sandbox

SUBMIT_LINE = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"  # mini-swe-agent's end-of-run signal
UNCAPPED_OUTPUT_PATH = "/tmp/agentcompass-submission.out"


@dataclass
class SandboxEnvironment:
    """mini-swe-agent's Environment protocol over one of our sandboxes."""

    sandbox: "Sandbox"
    cwd: str
    env: dict[str, str]
    timeout_s: float
    deadline: float  # time.monotonic() after which no command may run on
    log: Callable[[str], None]
    interpreter: list[str] = field(default_factory=list)  # e.g. ["bash", "-c"]; empty: the sandbox's shell
    system_vars: dict[str, str] = field(default_factory=dict)

    @property
    def in_shell(self) -> bool:
        return bool(getattr(self.sandbox, "persistent_shell", False))

    @property
    def config(self) -> dict[str, Any]:
        return {"cwd": self.cwd, "env": self.env, "timeout": self.timeout_s, "interpreter": self.interpreter}

    def command_line(self, command: str) -> tuple[str, dict[str, str]]:
        """The text the sandbox's shell runs, and the environment it gets. One stream, in order, as
        mini-swe-agent's own environments give it (stderr into stdout). With an interpreter, that shell
        only hands over: the interpreter alone gets the config's env, so BASH_ENV (the image's
        `conda activate`) is sourced once, by the shell that runs the command, as under `docker exec`.
        A persistent shell (Terminal-Bench's tmux login shell) gets the command as typed, the env exported there."""
        if self.in_shell:
            return (shlex.join([*self.interpreter, command]) if self.interpreter else command), self.env
        if not self.interpreter:
            return f"exec 2>&1\n{command}", self.env
        assignments = " ".join(shlex.quote(f"{k}={v}") for k, v in self.env.items())
        return f"exec 2>&1\nexec env {assignments} {shlex.join([*self.interpreter, command])}", {}

    def execute(self, action: dict[str, Any], cwd: str = "", *, timeout: float | None = None) -> dict[str, Any]:
        from minisweagent.exceptions import Submitted

        command = action.get("command", "")
        limit = max(1.0, min(timeout or self.timeout_s, self.deadline - time.monotonic()))
        text, env = self.command_line(command)
        # In a persistent shell the working directory is the shell's own, as the agent's `cd` left it.
        where = cwd or (None if self.in_shell else self.cwd)
        result = self.sandbox.exec(text, cwd=where, env=env, timeout=limit)
        # Text mode, as mini-swe-agent reads a command's output (subprocess text=True): \r\n and \r become \n,
        # in what the model sees and in the submission (a CRLF file's patch then no longer applies, as in mini).
        output = {"output": universal_newlines(result.stdout + result.stderr), "returncode": result.exit_code,
                  "exception_info": ""}
        if result.timed_out:
            output["returncode"] = -1
            output["exception_info"] = f"The command timed out after {limit:.0f} seconds and was killed."
        self.log(f"$ {command}\n[exit {output['returncode']}{' timed out' if result.timed_out else ''}] "
                 f"{output['output'][-2000:]}\n")
        lines = output["output"].lstrip().splitlines(keepends=True)
        if lines and lines[0].strip() == SUBMIT_LINE and output["returncode"] == 0:
            if output["output"].endswith(TRUNCATION_MARK):  # mini has no cap: the submission is read whole
                output["output"] = self.uncapped_output(text, env, where, limit)
                lines = output["output"].lstrip().splitlines(keepends=True)
            submission = "".join(lines[1:])
            raise Submitted({"role": "exit", "content": submission,
                             "extra": {"exit_status": "Submitted", "submission": submission}})
        return output

    def uncapped_output(self, text: str, env: dict[str, str], cwd: str | None, limit: float) -> str:
        """The submit command's output once more, into a file fetched whole (an exec's output is capped
        at 10 MiB; a submit command only prints what it submits)."""
        wrapped = f"( {text}\n) > {UNCAPPED_OUTPUT_PATH} 2>&1"
        self.sandbox.exec(wrapped, cwd=cwd, env=env, timeout=limit)
        return universal_newlines(read_whole(self.sandbox, UNCAPPED_OUTPUT_PATH))

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        return {**self.config, **self.system_vars, **kwargs}

    def serialize(self) -> dict[str, Any]:
        return {"info": {"config": {"environment": self.config,
                                    "environment_type": f"{__name__}.{type(self).__name__}"}}}


def universal_newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def sandbox_system_vars(sandbox: "Sandbox", cwd: str) -> dict[str, str]:
    """uname of the sandbox, for the prompt's <system_information> (the host's would mislead)."""
    result = sandbox.exec("uname -s; uname -r; uname -v; uname -m", cwd=cwd, timeout=30)
    values = result.stdout.splitlines() if result.ok else []
    keys = ("system", "release", "version", "machine")
    return {k: (values[i] if i < len(values) else "unknown") for i, k in enumerate(keys)}
