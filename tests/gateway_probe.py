"""A harness for the gateway's tests: like an installed CLI, it makes its model calls from inside the
sandbox, through the run's gateway, with only the per-trial token (python3's urllib, no SDK)."""

from __future__ import annotations

import json
from typing import Any

from agentcompass.core.errors import AgentError
from agentcompass.core.task import AgentOutcome, Usage

# Runs inside the sandbox: one plain and one streamed chat completion (or, mode hang, a stream that never ends).
CLIENT = r'''
import json, os, sys, urllib.request
url, key, mode, tier = os.environ["GW_URL"], os.environ["GW_KEY"], os.environ["GW_MODE"], os.environ["GW_TIER"]
def call(stream):
    body = {"model": "anything", "stream": stream, "messages": [{"role": "user", "content": f"tier={tier}"}],
            "chat_template_kwargs": {"enable_thinking": True, "reasoning_effort": "low"}}
    request = urllib.request.Request(url + "/chat/completions", json.dumps(body).encode(),
                                     {"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=600) as reply:
        return reply.status, reply.read().decode()
results = [call(True)] if mode == "hang" else [call(False), call(True)]
print(json.dumps(results))
'''


class GatewayProbe:
    needs_model = True
    uses_gateway = True

    def __init__(self, mode: str = "calls", **_: Any) -> None:
        self.mode = mode

    def run(self, task: Any, sandbox: Any, model: Any, trial: Any, task_format: Any) -> AgentOutcome:
        endpoint = trial.gateway.endpoint(trial, sandbox)
        trial.write("gateway.json", json.dumps({"root": endpoint.openai_base_url.split("/t/")[0]}))
        try:
            env = {"GW_URL": endpoint.openai_base_url, "GW_KEY": endpoint.api_key, "GW_MODE": self.mode,
                   "GW_TIER": str(model.reasoning)}
            result = sandbox.exec(f"python3 - <<'EOF'\n{CLIENT}\nEOF", env=env, timeout=600)
            trial.write("client.txt", result.stdout + result.stderr)
            if not result.ok:
                raise AgentError(f"the client failed: {result.stderr[-500:]}")
        finally:
            trial.gateway.release(endpoint)
        totals = endpoint.usage()
        return AgentOutcome(usage=Usage(model_calls=totals["calls"], tokens_in=totals["tokens_in"],
                                        tokens_out=totals["tokens_out"], tokens_cached=totals["tokens_cached"],
                                        generation_s=totals["generation_s"], cost_usd=totals["cost_usd"],
                                        cost_known=totals["cost_known"], model_errors=totals["errors"]))
