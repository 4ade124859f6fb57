"""The agent's shell on Terminal-Bench: an agent harness's commands run in the trial's tmux login shell.

Officially agents work in a tmux login shell (160 columns, profile and .bashrc read, /etc/profile's
PATH), so `cd`, `export` and an activated venv carry over from one command to the next. AgentShell
is the sandbox a harness gets: its exec writes the command as a script, types `source SCRIPT`
into that shell with the output going to a file (stdout and stderr as one stream, stdin from
/dev/null: harnesses read output, they answer no prompts) and the exit status beside it, and waits
on a tmux channel of its own. A command past its timeout gets C-c, then its foreground job is
killed; the shell must then answer a no-op, else a new login shell replaces it.
"""

from __future__ import annotations

import itertools
import shlex
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentcompass.formats.terminal_bench.tmux import TMUX, TMUX_TMPDIR, WAIT_MARGIN_S, TmuxSession
from agentcompass.core.sandbox import DEFAULT_OUTPUT_CAP, ExecResult

if TYPE_CHECKING:
    from agentcompass.core.sandbox import Sandbox

SHELL_DIR = "/tmp/agentcompass-shell"  # each command's script, output and exit status
INTERRUPT_GRACE_S = 1.0  # after C-c, before the foreground job is killed
READY_TIMEOUT_S = 10.0
INLINE_MAX_BYTES = 64 * 1024  # a script sent inside the exec's text (one argument may hold 128 KiB); longer, uploaded
TIMED_OUT = 124  # the exit status of a command past its timeout, as `timeout` and the providers give it
# Run by the tmux server (in its own process namespace, as the shell is): SIGKILL to the terminal's
# foreground process group, unless that is the shell itself.
KILL_FOREGROUND = ('fg=$(sed "s/.*) //" /proc/#{pane_pid}/stat | cut -d" " -f6); '
                   '[ "$fg" -gt 0 ] && [ "$fg" != #{pane_pid} ] && kill -9 -$fg; true')


class AgentShell:
    """A sandbox whose exec runs in a tmux session's shell; everything else is the sandbox's own.
    A command for another user (exec's `user`) is not the agent's: it runs apart, as exec runs it."""

    persistent_shell = True  # harnesses hand it the command as typed (mini_swe_agent: no `exec 2>&1`, no cwd)

    def __init__(self, sandbox: "Sandbox", session: TmuxSession, tmux: str = "tmux") -> None:
        self.sandbox = sandbox
        self.session = session
        # What the shell runs to say a command is done, whatever the agent did to its PATH or $TMUX.
        self.signal = f"{TMUX_TMPDIR} {tmux} wait -S"
        self._numbers = itertools.count(1)
        self._lock = threading.Lock()

    @classmethod
    def open(cls, sandbox: "Sandbox", name: str = "agent") -> "AgentShell":
        session = TmuxSession(sandbox, name)  # the container's configured user, as officially
        session.start()
        # The session's user writes the outputs there.
        found = sandbox.exec(f"mkdir -p {SHELL_DIR} && command -v tmux", timeout=60).stdout.strip()
        return cls(sandbox, session, found if found.startswith("/") else "tmux")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sandbox, name)

    def exec(self, cmd: str, *, cwd: str | None = None, env: dict[str, str] | None = None,
             timeout: float | None = None, user: str | None = None) -> ExecResult:
        """`cmd` sourced by the shell; `cwd` is changed to and `env` exported there first, and both stay."""
        if user is not None:
            return self.sandbox.exec(cmd, cwd=cwd, env=env, timeout=timeout, user=user)
        with self._lock:
            start = time.monotonic()
            code, output, timed_out = self._run(cmd, cwd, env or {}, timeout)
            return ExecResult(code, output, "", timed_out, time.monotonic() - start)

    def _run(self, cmd: str, cwd: str | None, env: dict[str, str], timeout: float | None) -> tuple[int, str, bool]:
        number = next(self._numbers)
        base, channel = f"{SHELL_DIR}/{number}", f"agentcompass-{number}"
        script = (f"cd {shlex.quote(cwd)} || return\n" if cwd else "") + "".join(
            f"export {name}={shlex.quote(value)}\n" for name, value in env.items()) + cmd + "\n"
        # A leading space keeps it out of the shell's history (HISTCONTROL=ignorespace, Debian's default).
        line = f" source {base}.sh > {base}.out 2>&1 < /dev/null; echo $? > {base}.rc; {self.signal} {channel}"
        target = shlex.quote(self.session.name)
        limit = f"timeout {timeout}s " if timeout else ""
        # One exec in the usual case: write the script, type the line, wait, print status and output.
        waited = self.sandbox.exec(
            f"{self._write(script, f'{base}.sh')}{TMUX} send-keys -t {target} -l {shlex.quote(line)} "
            f"&& {TMUX} send-keys -t {target} Enter && {TMUX_TMPDIR} {limit}tmux wait-for {channel}; "
            f'done=$?; echo "$done $(cat {base}.rc 2>/dev/null)"; [ $done = 0 ] && [ -s {base}.rc ] '
            f"&& head -c {DEFAULT_OUTPUT_CAP + 1} {base}.out && rm -f {base}.sh {base}.out {base}.rc",
            timeout=timeout + WAIT_MARGIN_S if timeout else None)
        header, _, output = waited.stdout.partition("\n")
        status, _, rc = header.strip().partition(" ")
        if status == "0" and rc.lstrip("-").isdigit():
            return int(rc), output, False
        timed_out = status == str(TIMED_OUT) or waited.timed_out
        if timed_out:
            code, note = TIMED_OUT, self._interrupt(number)
        elif not self.session.exists():  # `exit` ended the shell (and its session): the next command gets a new one
            self.session.start()
            code, note = 1, "\n[the shell exited; a new login shell was started]\n"
        else:
            code, note = 1, f"\n[the command could not be typed into the shell: {header.strip()}]\n"
        output = self.sandbox.exec(f"head -c {DEFAULT_OUTPUT_CAP + 1} {base}.out; rm -f {base}.sh {base}.out {base}.rc",
                                   timeout=120).stdout
        return code, output + note, timed_out

    def _write(self, script: str, path: str) -> str:
        """Shell text that writes the script at `path`: a here-document, or nothing once it is uploaded (too
        long for one exec's argument)."""
        if len(script.encode()) <= INLINE_MAX_BYTES:
            end = f"AGENTCOMPASS_{uuid.uuid4().hex}"
            return f"cat > {path} <<'{end}'\n{script}{end}\n"
        with tempfile.TemporaryDirectory() as scratch:
            local = Path(scratch) / "command.sh"
            local.write_text(script, encoding="utf-8")
            self.sandbox.upload(local, path)
        return ""

    def _interrupt(self, number: int) -> str:
        """C-c, then SIGKILL to the foreground job; the shell must answer again, else a new one replaces it."""
        target = shlex.quote(self.session.name)
        channel = f"agentcompass-{number}-ready"
        self.sandbox.exec(f"{TMUX} send-keys -t {target} C-c; sleep {INTERRUPT_GRACE_S}; "
                          f"{TMUX} run-shell -t {target} {shlex.quote(KILL_FOREGROUND)}", timeout=60)
        ready = self.sandbox.exec(
            f"{TMUX} send-keys -t {target} -l {shlex.quote(f' {self.signal} {channel}')} && {TMUX} send-keys -t {target} Enter "
            f"&& {TMUX_TMPDIR} timeout {READY_TIMEOUT_S}s tmux wait-for {channel}", timeout=READY_TIMEOUT_S + WAIT_MARGIN_S)
        if ready.ok:
            return "\n[the command timed out and was killed]\n"
        self.session.kill()
        self.session.start()
        return "\n[the command timed out and was killed; the shell did not answer, a new login shell was started]\n"
