"""How an interrupt reaches a run: which signals stop it, the handlers that turn them into Ctrl-C, and
what a run raises once it has cleaned up.

A leaf (nothing of agentcompass imported): the scheduler, the parent of the worker processes, the worker
processes themselves and a provider that runs every trial itself (gcp batch) all handle the same three
signals the same way, and none of them may need another of them to do it."""

from __future__ import annotations

import signal
import threading
from typing import Any, Callable

STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))
GRACE_S = 5.0  # after Ctrl-C (and closing every sandbox), how long in-flight workers get to wind down
EXIT_INTERRUPTED = 130  # a process's exit code after an interrupt, as a shell's 128 + SIGINT

Handler = Callable[[int, Any], None]


class Interrupted(KeyboardInterrupt):
    """Ctrl-C, SIGTERM or SIGHUP, after cleaning up: sandboxes closed, finished trials kept.

    A KeyboardInterrupt, so no `except Exception` on the way up swallows it."""


def raise_interrupt(signum: int, frame: object) -> None:
    """SIGTERM and SIGHUP behave like Ctrl-C, so a `kill` or a closed terminal also closes every sandbox."""
    raise KeyboardInterrupt()


def install_handlers(signals: tuple[int, ...], handler: Handler) -> None:
    """Set `handler` for each signal; only the main thread may (in-process callers elsewhere get none)."""
    if threading.current_thread() is threading.main_thread():
        for sig in signals:
            signal.signal(sig, handler)


def restore_handlers(previous: dict[int, Any]) -> None:
    if threading.current_thread() is threading.main_thread():
        for sig, handler in previous.items():
            if handler is not None:
                signal.signal(sig, handler)


def leave_ctrl_c_to_parent() -> None:
    """In a worker process: Ctrl-C (sent to the whole process group) does nothing here, as the parent
    forwards each interrupt as a SIGTERM. A handler, not SIG_IGN: an ignored signal stays ignored across
    exec, and the trials' commands must still take Ctrl-C (Terminal-Bench's timeouts send it)."""
    signal.signal(signal.SIGINT, lambda signum, frame: None)
