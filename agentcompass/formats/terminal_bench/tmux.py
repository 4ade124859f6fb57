"""A tmux session in the sandbox, driven the way Terminal-Bench's harness drives its TmuxSession.

The official harness types the oracle's solution and `bash /tests/run-tests.sh` into tmux login
shells (160x40; tmux keeps 2,000 rows of history, as officially) and parses the captured pane. Where the task's image has
tmux (every official image does: the harness requires it) we do the same through exec; the keys
and the blocking protocol (`; tmux wait -S done`) are the official ones. Each user's server listens
on tmux's default socket under the sandbox's /tmp (the local provider's own /tmp, not the host's).
Where a server cannot outlive the command that started it (the local provider ends whatever a
command leaves behind), it runs in the foreground as a command of its own for the sandbox's life.
"""

from __future__ import annotations

import math
import re
import shlex
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentcompass.core.sandbox import Sandbox

ENTER_KEYS = {"Enter", "C-m", "KPEnter", "C-j", "^M", "^J"}
DONE_CHANNEL = "done"
WAIT_MARGIN_S = 30.0  # the exec's own limit, past tmux's `timeout`
TMUX_TMPDIR = "TMUX_TMPDIR=/tmp"  # in the command's text, so the local provider maps /tmp to the sandbox's own
TMUX = f"{TMUX_TMPDIR} tmux"
SERVER_START_S = 10.0


class SessionTimeout(Exception):
    """A blocking command did not finish within its max_timeout_sec."""


@dataclass
class Keystrokes:
    """One entry of solution.yaml: `command` typed, then Enter unless append_enter is false."""

    command: str
    min_timeout_sec: float = 0.0
    max_timeout_sec: float = 180.0
    block: bool = False
    append_enter: bool = True

    @classmethod
    def parse(cls, entry: Any) -> "Keystrokes":
        """A string, or a mapping with a string `command` and the official optional fields; ValueError otherwise."""
        if isinstance(entry, str):
            return cls(entry)
        if not isinstance(entry, dict) or not isinstance(entry.get("command"), str):
            raise ValueError(f"expected a command string or a mapping with a string `command`, got {entry!r}")
        # As terminal-bench's TerminalCommand (a pydantic model): other keys are ignored, values coerced.
        from pydantic import TypeAdapter, ValidationError

        try:
            return TypeAdapter(cls).validate_python({k: v for k, v in entry.items() if k in KEYSTROKE_FIELDS})
        except ValidationError as exc:
            raise ValueError(f"{entry!r}: {' '.join(str(exc).split())[:300]}") from exc


KEYSTROKE_FIELDS = ("command", "min_timeout_sec", "max_timeout_sec", "block", "append_enter")


def has_tmux(sandbox: "Sandbox") -> bool:
    return sandbox.exec("tmux -V", timeout=30).exit_code == 0


def serve(sandbox: "Sandbox", user: str | None) -> None:
    """A tmux server in the foreground, as a command of its own that lasts until the sandbox closes; it ends
    once it holds no session (exit-empty, set by start), as a daemonized server does."""
    inner = getattr(sandbox, "inner", sandbox)  # its time is the sandbox's life, not a command's (TimedSandbox)

    def run() -> None:
        try:
            inner.exec(f"{TMUX_TMPDIR} exec tmux -D", timeout=None, user=user)
        except Exception:  # the sandbox closed under it: nothing is left to serve
            pass

    threading.Thread(target=run, name="tmux-server", daemon=True).start()


def executes(key: str) -> bool:
    return key in ENTER_KEYS or bool(re.search(r"[\r\n]$", key))


def blocking_keys(keys: list[str]) -> list[str]:
    """The keys with their final Enter(s) replaced by `; tmux wait -S done` Enter, as the harness sends them."""
    keys = list(keys)
    while keys and executes(keys[-1]):
        stripped = "" if keys[-1] in ENTER_KEYS else keys[-1].rstrip("\r\n")
        if stripped:
            keys[-1] = stripped
        else:
            keys.pop()
    return [*keys, f"; tmux wait -S {DONE_CHANNEL}", "Enter"]


class TmuxSession:
    def __init__(self, sandbox: "Sandbox", name: str, user: str | None = None) -> None:
        self.sandbox = sandbox
        self.name = name
        self.user = user  # None: the container's configured user

    def _tmux(self, args: str, timeout: float | None = 60) -> Any:
        return self.sandbox.exec(f"{TMUX} {args}", timeout=timeout, user=self.user)

    @property
    def target(self) -> str:
        return shlex.quote(f"={self.name}")  # exactly this session, not one whose name starts so

    def start(self) -> None:
        """A new session: a login shell (tmux's default) in the sandbox's working directory."""
        name = shlex.quote(self.name)
        new = f"new-session -x 160 -y 40 -d -s {name} \\; set-option -t {name} history-limit 50000"
        started = self._tmux(new)
        if started.exit_code == 0 and not self.exists():  # its server ended with the command that started it
            serve(self.sandbox, self.user)
            deadline = time.monotonic() + SERVER_START_S
            while (started := self._tmux(f"-N {new} \\; set-option -s exit-empty on")).exit_code != 0:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.1)
        if started.exit_code != 0:
            raise RuntimeError(f"cannot start tmux session {self.name}: {(started.stdout + started.stderr).strip()[:300]}")

    def exists(self) -> bool:
        return self._tmux(f"has-session -t {self.target}", timeout=30).exit_code == 0

    def kill(self) -> None:
        self._tmux(f"kill-session -t {self.target}", timeout=30)

    def send_keys(self, keys: list[str], block: bool = False, min_timeout_sec: float = 0.0,
                  max_timeout_sec: float = 180.0) -> None:
        start = time.monotonic()
        if block and keys and executes(keys[-1]):
            self._tmux(f"send-keys -t {shlex.quote(self.name)} {shlex.join(blocking_keys(keys))}")
            limit = None if math.isinf(max_timeout_sec) else max_timeout_sec
            prefix = "" if limit is None else f"timeout {limit}s "
            waited = self.sandbox.exec(f"{TMUX_TMPDIR} {prefix}tmux wait {DONE_CHANNEL}", user=self.user,
                                       timeout=None if limit is None else limit + WAIT_MARGIN_S)
            if waited.exit_code != 0 or waited.timed_out:
                raise SessionTimeout(f"command did not finish within {max_timeout_sec}s")
            return
        self._tmux(f"send-keys -t {shlex.quote(self.name)} {shlex.join(keys)}")
        remaining = min_timeout_sec - (time.monotonic() - start)
        if remaining > 0:
            time.sleep(remaining)

    def type_command(self, entry: Keystrokes) -> None:
        keys = [entry.command, "Enter"] if entry.append_enter else [entry.command]
        self.send_keys(keys, block=entry.block, min_timeout_sec=entry.min_timeout_sec,
                       max_timeout_sec=entry.max_timeout_sec)

    def capture(self) -> str:
        """The whole pane, history included (2,000 rows: history-limit applies to new windows only), without colour codes."""
        return self._tmux(f"capture-pane -p -S - -t {shlex.quote(self.name)}").stdout
