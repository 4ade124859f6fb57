"""structlog set-up: readable lines on the console, JSON lines in the run's log.jsonl, both with every
secret value the process knows scrubbed (agentcompass.core.secret_values).

A pooled sweep runs several runs in one process: a thread working for one run says so
(`attributed_to`), and only that run's log.jsonl takes its lines; lines of no run in
particular (an interrupt) go to every run's log.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import structlog

from agentcompass.core.secret_values import scrub, scrub_data

_configured = False
_owner = threading.local()  # .run_dir: the run the current thread works for


def scrub_event(_: object, __: str, event: dict[str, object]) -> dict[str, object]:
    """Every secret value the process knows, out of the event's fields (agentcompass.core.secret_values)."""
    return scrub_data(event)  # type: ignore[no-any-return]


PRE_CHAIN = [structlog.stdlib.add_log_level, structlog.processors.TimeStamper(fmt="iso", utc=True), scrub_event]


class ScrubbingFormatter(structlog.stdlib.ProcessorFormatter):
    """The rendered line scrubbed once more: what a renderer added (an exception's text) holds no secret either."""

    def format(self, record: logging.LogRecord) -> str:
        return scrub(super().format(record))


def configure() -> None:
    global _configured
    if _configured:
        return
    structlog.configure(
        processors=[structlog.stdlib.filter_by_level, *PRE_CHAIN, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    logger = logging.getLogger("agentcompass")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    console = logging.StreamHandler(sys.stderr)
    console.setLevel(logging.WARNING)  # progress shows the routine; the console gets what needs eyes
    console.setFormatter(ScrubbingFormatter(
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, structlog.dev.ConsoleRenderer(colors=False)],
        foreign_pre_chain=PRE_CHAIN,
    ))
    logger.addHandler(console)
    _configured = True


class RunLog:
    """Attach log.jsonl of one run directory for the duration of a `with` block."""

    def __init__(self, path: Path) -> None:
        self.handler = logging.FileHandler(path, encoding="utf-8")
        self.handler.setFormatter(ScrubbingFormatter(
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, structlog.processors.JSONRenderer()],
            foreign_pre_chain=PRE_CHAIN,
        ))
        run_dir = path.parent
        self.handler.addFilter(lambda record: getattr(_owner, "run_dir", None) in (None, run_dir))

    def __enter__(self) -> "RunLog":
        configure()
        logging.getLogger("agentcompass").addHandler(self.handler)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger("agentcompass").removeHandler(self.handler)
        self.handler.close()


@contextmanager
def attributed_to(run_dir: Path) -> Iterator[None]:
    """Log lines of this thread belong to the run in run_dir for the duration of a `with`."""
    previous = getattr(_owner, "run_dir", None)
    _owner.run_dir = run_dir
    try:
        yield
    finally:
        _owner.run_dir = previous
