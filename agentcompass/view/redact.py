"""Anything that looks like an API key is masked before the viewer shows text. Keys never reach the
results (the run keeps them out), but an agent can print one it found in its sandbox."""

from __future__ import annotations

import re

KEY_SHAPES = re.compile(
    r"(?:sk-(?:ant-|proj-)?[A-Za-z0-9_\-]{16,}"        # OpenAI, Anthropic
    r"|AIza[0-9A-Za-z_\-]{30,}"                         # Google API keys
    r"|gh[pousr]_[A-Za-z0-9]{30,}"                      # GitHub tokens
    r"|hf_[A-Za-z0-9]{30,}"                             # Hugging Face
    r"|(?:ak|as)-[A-Za-z0-9]{20,}"                      # Modal token ids and secrets
    r"|xox[abprs]-[A-Za-z0-9\-]{10,})")
ASSIGNED = re.compile(r"(?i)((?:api[_-]?key|token|secret|password|authorization)[\"']?\s*[:=]\s*[\"']?(?:bearer\s+)?)"
                      r"([^\s\"',;]{8,})")


def redact(text: str) -> str:
    return ASSIGNED.sub(lambda m: m.group(1) + "***", KEY_SHAPES.sub("***", text))
