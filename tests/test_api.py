"""The public contract for extensions (agentcompass.api) and the old paths the package split moved: the names
are pinned (removing one is a deliberate change, made here and in docs/extending.md), each is the very object
the core runs by, importing the module stays cheap, and an old path still loads the same module, with a
DeprecationWarning naming the importing line."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import agentcompass.api as api
from agentcompass.core import contracts, context, errors, sandbox, schema, task
from agentcompass.core.moved import MOVED
from agentcompass.formats import base as format_base

REPO = Path(__file__).resolve().parent.parent

PINNED = {
    "Provider": sandbox, "Sandbox": sandbox, "SandboxSpec": sandbox, "ExecResult": sandbox,
    "TaskFormat": contracts, "Harness": contracts,
    "SelectionParams": format_base, "select_tasks": format_base, "source_path": format_base,
    "Task": task, "Grade": task, "AgentOutcome": task, "Usage": task, "TrialContext": context,
    "Strict": schema, "Recipe": schema, "ModelConfig": schema,
    "UserError": errors, "TrialError": errors, "InfraError": errors, "AgentError": errors, "VerifierError": errors,
    "SandboxLost": errors, "BackPressure": errors, "BuildFailed": errors, "TaskRefused": errors,
    "FatalInfraError": errors,
    "AgentTimeoutError": errors,
    "NonZeroAgentExitCodeError": errors,
    "ContextWindowExceededError": errors,
    "OutputLengthExceededError": errors,
    "AgentSafetyRefusalError": errors,
    "BadRequestError": errors,
    "AgentAuthenticationError": errors,
    "ModelNotFoundError": errors,
    "ApiRateLimitError": errors,
    "ApiInternalServerError": errors,
    "VerifierTimeoutError": errors,
    "RewardFileNotFoundError": errors,
    "RewardFileEmptyError": errors,
    "VerifierOutputParseError": errors,
}


def test_the_public_names_are_pinned():
    assert sorted(api.__all__) == sorted(PINNED)


@pytest.mark.parametrize("name", sorted(PINNED))
def test_each_public_name_is_the_object_the_core_runs_by(name):
    assert getattr(api, name) is getattr(PINNED[name], name)


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="TrialRunner"):
        api.TrialRunner  # the core's own, not part of the contract


def test_importing_the_public_module_imports_nothing_it_names():
    probe = ("import sys, agentcompass.api; "
             "print(sorted(m for m in sys.modules if m.startswith(('agentcompass.core.', 'pydantic')) "
             "and m != 'agentcompass.core.faces' and m != 'agentcompass.core.moved'))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}).stdout
    assert out.strip() == "[]"


def import_fresh(name: str) -> tuple[object, list[warnings.WarningMessage]]:
    """Import an old path as if for the first time in this process (another test may have imported it)."""
    sys.modules.pop(name, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = __import__(name, fromlist=["_"])
    return module, [w for w in caught if issubclass(w.category, DeprecationWarning)]


@pytest.mark.parametrize("old", ["agentcompass.sandbox", "agentcompass.task", "agentcompass.errors",
                                 "agentcompass.trial", "agentcompass.schema"])
def test_an_old_path_is_the_moved_module_itself_with_a_warning(old):
    module, caught = import_fresh(old)
    new = sys.modules[MOVED[old]]
    assert module is new  # the same module: its classes are the same classes, `except InfraError` still catches
    assert len(caught) == 1 and MOVED[old] in str(caught[0].message) and "agentcompass.api" in str(caught[0].message)
    assert caught[0].filename == __file__  # the importing line is named, not the import machinery


def test_every_moved_module_exists_at_its_new_path():
    missing = [new for new in MOVED.values() if not (REPO / (new.replace(".", "/") + ".py")).is_file()]
    assert missing == []


def test_an_old_provider_module_from_last_month_still_loads_by_its_dotted_path(tmp_path):
    """Written as it was before the package split, named by `impl:` and loaded by the registry."""
    (tmp_path / "old_style_env.py").write_text(
        "from agentcompass.sandbox import ExecResult, SandboxSpec\n"
        "from agentcompass.errors import InfraError\n"
        "class OldProvider:\n"
        "    name = 'old'\n"
        "    def check(self, spec: SandboxSpec) -> None: ...\n"
        "    def open(self, spec: SandboxSpec):\n"
        "        raise InfraError('unused')\n")
    probe = ("import warnings; warnings.simplefilter('always')\n"
             "from agentcompass.core.registry import load\n"
             "from agentcompass.api import Provider\n"
             "cls = load('provider', 'old_style_env:OldProvider')\n"
             "print(isinstance(cls(), Provider))\n")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path,
                            env={"PYTHONPATH": f"{REPO}:{tmp_path}", "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"
    assert "old_style_env.py:1: DeprecationWarning: agentcompass.sandbox is deprecated" in result.stderr
    assert "old_style_env.py:2: DeprecationWarning: agentcompass.errors is deprecated" in result.stderr


def test_an_old_impl_path_in_a_yaml_loads_the_class_it_named():
    """Before the split, `impl: agentcompass.providers.gcp_eval:GcpBatchProvider` named the batch provider."""
    from agentcompass.core.registry import load

    sys.modules.pop("agentcompass.providers.gcp_eval", None)
    with pytest.warns(DeprecationWarning, match="agentcompass.providers.gcp_eval is deprecated"):
        old = load("provider", "agentcompass.providers.gcp_eval:GcpBatchProvider")
    assert old is load("provider", "gcp_batch")
