"""Leaving the process once a command is done, without tearing the interpreter down object by object.

After a run of thousands of trials the heap holds every task, config and result; Python's own exit
frees them one at a time and runs the cycle collector over what is left, which took 0.2 s after 20
trials and over half a second after 10,000 (benchmarks/scale.py), all after the last line was printed.
Everything that must outlive the command is already on disk by then (trials.jsonl and summary.json are
fsynced as they are written), so the process ends as the worker processes do (core/shard_worker.py):
the exit handlers run (the local provider's workspace removals, logging's flush), stdout and stderr are
flushed, then os._exit. A thread still working that is not a daemon (none of ours is) gets the ordinary
exit instead, which waits for it.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import NoReturn


def leave(code: int | None) -> NoReturn:
    """Exit with `code` (None: 0, as sys.exit takes it): exit handlers and flushes as Python's own exit,
    without the teardown."""
    code = 0 if code is None else code
    working = any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread())
    if working or not isinstance(code, int):
        sys.exit(code)  # its ordinary exit joins that thread (and says what a code that is no number means)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`| head -1`) or stream: nothing more can reach it
            pass
    os._exit(code)
