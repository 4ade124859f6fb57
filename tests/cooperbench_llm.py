"""The scripted endpoint for CooperBench's coop tests: one script per agent, told apart by the prompt.

FakeLLM answers by how many assistant turns a conversation holds; two coop agents share the endpoint,
so each conversation is matched to its script by a marker in its first messages ("You are agent1").
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any

from fake_llm_server import FakeLLM


@dataclass
class PerAgentLLM(FakeLLM):
    scripts: dict[str, list[str]] = field(default_factory=dict)  # marker -> commands; else `commands`
    _choose: threading.Lock = field(default_factory=threading.Lock)

    def decide(self, api: str, body: dict[str, Any], authorization: str) -> tuple[int, Any]:
        opening = json.dumps(body.get("messages", [])[:2])
        script = next((commands for marker, commands in self.scripts.items() if marker in opening), None)
        with self._choose:  # FakeLLM reads self.commands: one conversation's choice at a time
            default = self.commands
            self.commands = script or default
            try:
                return super().decide(api, body, authorization)
            finally:
                self.commands = default
