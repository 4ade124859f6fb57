"""mistral_vibe: Mistral's `mistral-vibe` CLI (PyPI), driven through its own ACP server (`vibe-acp`) by the acp harness.

Vibe's headless paths are its ACP server and a native launcher; the ACP one runs wholly on the bundled CPython, so
the task image's C library never matters. Its config (`harnesses/mistral_vibe.yaml`: `config_files`) names the
endpoint as an OpenAI-style provider whose key is read from the environment, and the model as the active one; the
client also chooses it over ACP (Vibe advertises a `model` config option). Telemetry, update checks and
auto-update are off, and session titles too (a title call racing the session's end would be metered or not by
chance). Everything else (usage, errors, the record in `mistral_vibe.jsonl`) is the acp harness's.
"""

from __future__ import annotations

from agentcompass.harnesses.acp import AcpHarness


class MistralVibeHarness(AcpHarness):
    name, package = "mistral_vibe", "mistral-vibe"
    model_apis = ("openai",)  # its config names the endpoint as an OpenAI-style provider
