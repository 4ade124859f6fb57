"""A hostile installed agent for the spend-cap tests: the shared installed-CLI run (agentcompass.harnesses.installed)
around a "CLI" that calls the gateway in a loop and never stops on its own, whatever the gateway answers. Only the
spend cap's stop can end it before its time limit; it says so in its output when it gets SIGTERM."""

from __future__ import annotations

from typing import Any

from agentcompass.core.task import Usage
from agentcompass.harnesses.installed import InstalledAgent

LOOP = r'''
import json, os, signal, sys, time, urllib.error, urllib.request
def stopped(*_):
    print("stopped by SIGTERM", flush=True)
    sys.exit(143)
signal.signal(signal.SIGTERM, stopped)
body = json.dumps({"model": "any", "messages": [{"role": "user", "content": "go on"}]}).encode()
while True:
    request = urllib.request.Request(os.environ["GW_URL"] + "/chat/completions", body,
                                     {"Authorization": "Bearer " + os.environ["GW_KEY"], "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            print("status", reply.status, flush=True)
    except urllib.error.HTTPError as refused:
        print("status", refused.code, refused.read().decode()[:300], flush=True)
    time.sleep(0.2)
'''


class GatewayLooper(InstalledAgent):
    name, package, command_name, binary = "gateway_looper", "none", "python3", "none"
    model_apis = ("openai",)

    def prepare(self) -> None:
        """No npm package: the sandbox's python3 runs the loop."""

    def install(self, sandbox: Any, timeout_s: float = 0) -> None:
        """Nothing to install."""

    def api_kind(self, model: Any) -> str:
        return "chat"

    def config_files(self, model: Any, endpoint: Any) -> dict[str, str]:
        return {"loop.py": LOOP}

    def cli_env(self, model: Any, endpoint: Any) -> dict[str, str]:
        return {"GW_URL": endpoint.openai_base_url, "GW_KEY": endpoint.api_key}

    def command(self, model: Any, workdir: str) -> str:
        return "python3 -u \"$HOME/loop.py\""

    def read_usage(self, stdout: str) -> Usage:
        return Usage()

    def endpoint_error(self, output: str) -> str | None:
        return None
