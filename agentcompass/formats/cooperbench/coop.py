"""CooperBench's coop setting: two sandboxes of the task image, a message channel and a shared git remote.

On docker the trial's sandbox (agent1) is the client of a per-trial network that also holds `git`, a
container of the same image running git's own `git daemon` (push enabled) on a bare repository; agent2's
sandbox joins that network, so the remote `team` (git://git/repo.git) is reachable by that pair only.

Messages: `send_message [TO] [TEXT]` (the text from stdin when not given) drops a file in the sender's
outbox; this process relays each one into the other sandbox's inbox, where `receive_messages` prints and
consumes them, and appends it with its time to messages.jsonl in the trial dir. Relaying through the
sandboxes' own exec needs no server and no network between the agents' sandboxes.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from agentcompass.core.errors import InfraError
from agentcompass.core.results import now_iso
from agentcompass.core.sandbox import ComposeSpec, ContainerSpec

if TYPE_CHECKING:
    from agentcompass.core.sandbox import Sandbox, SandboxSpec
    from agentcompass.core.context import TrialContext

AGENTS = ("agent1", "agent2")
GIT_HOST = "git"
REMOTE_URL = f"git://{GIT_HOST}/repo.git"
COOP_DIR = "/tmp/agentcompass-coop"
RELAY_EVERY_S = 1.0  # a message waits at most this long; each poll is one exec per sandbox
KEEP_ALIVE = ["-c", "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"]
GIT_DAEMON = ("mkdir -p /git && git init -q --bare /git/repo.git && "
              "exec git daemon --reuseaddr --export-all --enable=receive-pack --base-path=/git --listen=0.0.0.0 /git")
GIT_HEALTHCHECK = {"test": ["CMD-SHELL", "git ls-remote git://127.0.0.1/repo.git >/dev/null 2>&1"],
                   "interval": 500_000_000, "timeout": 5_000_000_000, "retries": 120}

SEND = """#!/bin/sh
# send_message [TO] [TEXT...]: a message to your colleague (the text from stdin when none is given).
case "$1" in agent1|agent2) to=$1; shift;; *) to={other};; esac
mkdir -p {dir}/outbox {dir}/tmp
tmp=$(mktemp {dir}/tmp/msg.XXXXXX)
if [ $# -gt 0 ]; then printf '%s' "$*" > "$tmp"; else cat > "$tmp"; fi
mv "$tmp" {dir}/outbox/$(date +%s%N)-$$
echo "message sent to $to"
"""
RECEIVE = """#!/bin/sh
# receive_messages: print the messages your colleague sent since the last call, oldest first.
mkdir -p {dir}/inbox
found=
for f in $(ls {dir}/inbox | sort); do
    found=1; printf '[Message from {other}]: '; cat "{dir}/inbox/$f"; echo; rm -f "{dir}/inbox/$f"
done
[ -n "$found" ] || echo "no new messages"
"""
# Print each waiting message base64-encoded on a line of its own, and remove it (an outbox file is complete:
# send_message moves it in whole).
TAKE_OUTBOX = (f"mkdir -p {COOP_DIR}/outbox; cd {COOP_DIR}/outbox && for f in $(ls | sort); do "
               'base64 "$f" | tr -d "\\n"; echo; rm -f "$f"; done')


def coop_compose(image: str | None, build_context: Path | None, build_args: dict[str, str]) -> ComposeSpec:
    """agent1's sandbox as the client of the trial's network, beside the git daemon (same image)."""
    client = ContainerSpec(name=AGENTS[0], entrypoint=["/bin/sh"], command=KEEP_ALIVE, build_args=dict(build_args))
    git = ContainerSpec(name=GIT_HOST, image=image, build_context=build_context, build_args=dict(build_args),
                        entrypoint=["/bin/sh", "-c"], command=[GIT_DAEMON], healthcheck=GIT_HEALTHCHECK)
    return ComposeSpec(client=client, services=[git])


def partner_spec(spec: "SandboxSpec") -> "SandboxSpec":
    """agent2's sandbox: the same image, on agent1's network (where the git daemon is)."""
    client = ContainerSpec(name=AGENTS[1], entrypoint=["/bin/sh"], command=KEEP_ALIVE, network_mode=spec.name,
                           build_args=dict(spec.build_args))
    return dataclasses.replace(spec, name=f"{spec.name[:112]}-agent2", compose=ComposeSpec(client=client),
                               labels={**spec.labels, "agent": AGENTS[1]})


def install_tools(sandbox: "Sandbox", trial: "TrialContext", agent: str, workdir: str, first: bool) -> None:
    """send_message / receive_messages in the sandbox, and the remote `team` (agent1 pushes the base as main)."""
    other = AGENTS[1] if agent == AGENTS[0] else AGENTS[0]
    for name, text in (("send_message", SEND), ("receive_messages", RECEIVE)):
        local = trial.write(f"coop/{agent}-{name}", text.format(dir=COOP_DIR, other=other))
        sandbox.upload(local, f"/usr/local/bin/{name}")
    push = " && git push -q team HEAD:refs/heads/main" if first else ""
    result = sandbox.exec("chmod +x /usr/local/bin/send_message /usr/local/bin/receive_messages && "
                          f"git remote add team {REMOTE_URL}{push}", cwd=workdir, timeout=120)
    if not result.ok:
        raise InfraError(f"cannot set up {agent}'s coop tools: {(result.stdout + result.stderr).strip()[-300:]}")


class MessageRelay:
    """Moves messages between the two sandboxes until stopped, logging each to messages.jsonl."""

    def __init__(self, sandboxes: dict[str, "Sandbox"], trial: "TrialContext") -> None:
        self.sandboxes = sandboxes
        self.trial = trial
        self.count = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="coop-relay", daemon=True)

    def __enter__(self) -> "MessageRelay":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        try:
            self.relay_once()  # what was sent in the last moments
        except Exception:  # a sandbox gone at the end loses its last message, not the trial
            pass

    def _loop(self) -> None:
        while not self.stop.wait(RELAY_EVERY_S):
            try:
                self.relay_once()
            except Exception:  # a failed poll is tried again; the agents' own commands report real trouble
                continue

    def relay_once(self) -> None:
        for sender, source in self.sandboxes.items():
            taken = source.exec(TAKE_OUTBOX, timeout=60)
            for line in taken.stdout.split():
                text = base64.b64decode(line).decode("utf-8", errors="replace")
                receiver = next(a for a in self.sandboxes if a != sender)
                self.count += 1
                self.deliver(receiver, line, f"{self.count:06d}")
                self.trial.append("messages.jsonl", json.dumps(
                    {"time": now_iso(), "from": sender, "to": receiver, "text": text}) + "\n")

    def deliver(self, receiver: str, encoded: str, name: str) -> None:
        self.sandboxes[receiver].exec(
            f"mkdir -p {COOP_DIR}/inbox && echo {encoded} | base64 -d > {COOP_DIR}/inbox/.{name} && "
            f"mv {COOP_DIR}/inbox/.{name} {COOP_DIR}/inbox/{name}", timeout=60)
