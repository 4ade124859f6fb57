"""What a harness or a format may use of the trial it runs in (`TrialContext`), in a leaf of its own so
formats, harnesses and the gateway need not import the trial."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol

from agentcompass.core.durable import write_file
from agentcompass.core.secret_values import scrub
from agentcompass.core.results import write_atomic

if TYPE_CHECKING:
    from agentcompass.core.sandbox import Sandbox, SandboxSpec


class ModelGateway(Protocol):
    """The run's model gateway as a harness sees it (agentcompass.gateway.server.Gateway is the one there is):
    an endpoint per trial for its agent (URLs, token, meter), released when the trial ends."""

    def endpoint(self, trial: "TrialContext", sandbox: "Sandbox") -> Any: ...

    def release(self, endpoint: Any) -> None: ...


@dataclass
class TrialContext:
    """What a harness or format may use of the trial it runs in."""

    task_id: str
    attempt: int
    dir: Path
    run_name: str
    labels: dict[str, str] = field(default_factory=dict)
    stopping: threading.Event = field(default_factory=threading.Event)  # set on Ctrl-C: abandon waits at once
    gateway: "ModelGateway | None" = None  # the run's model gateway, for a harness with uses_gateway = True
    # Opens one more sandbox for this trial (CooperBench coop: a second agent's), closed with the trial's at the latest.
    open_sandbox: "Callable[[SandboxSpec], Sandbox] | None" = None
    # Verifier paths the agent left something in (formats/integrity.py): recorded as details.tampering.
    tampering: list[str] = field(default_factory=list)
    # Evidence that the agent attacked the verdict or the count (a link out of its tree, a planted hook, a reward
    # rewritten behind the verifier's back): the attempt is failed whatever was graded (details.tampered).
    tampered: list[str] = field(default_factory=list)

    def flag_tampering(self, paths: list[str]) -> None:
        """Verifier paths the agent left something in that were cleared before the verifier ran, as the official
        harness clears them: recorded, and the verdict stands (the verifier ran on fresh inputs)."""
        self.tampering.extend(p for p in paths if p not in self.tampering)

    def mark_tampered(self, evidence: str) -> None:
        """The agent did something that could change its verdict or leave the count: the attempt is failed,
        counted in the rate's base, with this evidence (a path, a command, what was found) in its details."""
        if evidence not in self.tampered:
            self.tampered.append(evidence)

    def write(self, name: str, text: str) -> Path:
        path = os.path.join(self.dir, name)
        write_atomic(path, text)
        return Path(path)

    def log(self, name: str, text: str) -> None:
        """A command's output, kept only when there is some: an empty file per trial is a file create
        (the dearest file call there is) times thousands. Written in place, not via a temp file: a log
        cut short by a crash is harmless, as the attempt then runs again in a fresh dir."""
        if text:
            write_file(os.path.join(self.dir, name), text.encode("utf-8"), make_dir=True)  # a step's own dir

    def append(self, name: str, text: str) -> None:
        with open(os.path.join(self.dir, name), "a", encoding="utf-8") as handle:
            handle.write(scrub(text))  # the writers' choke point (core/durable.py) is not on this path
