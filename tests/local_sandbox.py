"""What the local provider's test modules share: the sandbox fixture, one per isolation, and a runner
process that opens a sandbox and runs one command."""

from __future__ import annotations

import shutil

import pytest

from agentcompass.core.sandbox import SandboxSpec
from agentcompass.providers.local.provider import LocalProvider

HAS_BWRAP = shutil.which("bwrap") is not None
ISOLATIONS = ["none", pytest.param("bwrap", marks=pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap not installed"))]


@pytest.fixture(params=ISOLATIONS)
def sandbox(request, tmp_path):
    provider = LocalProvider(isolation=request.param, root=str(tmp_path))
    box = provider.open(SandboxSpec(name="t", workdir="/app", allow_internet=False))
    yield box
    box.close()


# Peak RSS from VmHWM: ru_maxrss would carry over the forking parent's peak (Linux keeps it across exec),
# which is pytest's own size late in a long session, not this runner's.
RUNNER = """
import json, re, sys, threading
from agentcompass.providers.local.provider import LocalProvider
from agentcompass.core.sandbox import SandboxSpec
box = LocalProvider(isolation=sys.argv[1], root=sys.argv[2]).open(SandboxSpec(name="t"))
result = box.exec(sys.argv[3], timeout=120)
print(json.dumps({"exit_code": result.exit_code, "stdout_len": len(result.stdout), "stderr_len": len(result.stderr),
                  "tail": result.stdout[-300:], "peak_rss_kib": int(re.search(r"VmHWM:\\s+(\\d+)", open("/proc/self/status").read()).group(1))}))
"""
