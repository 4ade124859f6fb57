"""The module paths the package split moved (`agentcompass.sandbox` is now `agentcompass.core.sandbox`), kept
importing for one more release: an extension written against an old path still loads, gets the very module
it meant (the same objects, not copies, so `isinstance` and `except` agree), and is told once where to import
from instead (`agentcompass.api`, docs/extending.md).

An import hook rather than a file per old module: the tree stays what docs/architecture.md draws
(tests/test_architecture.py), and an old name costs nothing until something imports it."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import warnings
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

REMOVED_IN = "0.3"  # the release that drops these paths (docs/extending.md, "Deprecation policy")

# Every module the package split moved (git show 7aaf60d), old name -> new name: the top-level ones into the core,
MOVED: dict[str, str] = {f"agentcompass.{name}": f"agentcompass.core.{name}" for name in (
    "calls", "catalog", "checks", "config", "cores", "durable", "errors", "fingerprint", "launch", "logs",
    "models", "overrides", "pacing", "pool", "progress", "provenance", "readiness", "registry", "results",
    "runlock", "runner", "sandbox", "scheduler", "schema", "scoring", "shards", "task", "trial")}
# ... and the flat modules that became a package's parts. Names only: nothing here imports them until asked.
# (An old module whose name is now a package, agentcompass.providers.docker, is that package's face.)
SPLIT = {
    "": {"cli": "commands.cli", "gateway_app": "gateway.app", "gateway_check": "gateway.check",
         "live_viewers": "view.live"},
    "formats.": {"cooperbench_coop": "cooperbench.coop", "cooperbench_grade": "cooperbench.grade",
                 **{f"harbor_{part}": f"harbor.{part}" for part in ("collect", "dataset", "fields", "schema",
                                                                    "verifier")},
                 **{f"swebench_{part}": f"swebench.{part}" for part in ("batch", "classic", "data", "report")},
                 **{f"terminal_bench_{part}": f"terminal_bench.{part}" for part in ("compose", "parsers", "shell",
                                                                                    "tmux")}},
    "providers.": {"docker_build": "docker.build", "docker_compose": "docker.compose", "docker_egress": "docker.egress",
                   "dockerfile_heredocs": "docker.heredocs", "gcs": "gcp.storage", "ssh": "gcp.ssh",
                   **{f"gcp_{part}": f"gcp.{part}" for part in ("api", "batch", "eval", "oslogin", "setup", "sizing",
                                                                "vm")},
                   "local_procs": "local.procs", "modal_setup": "modal.setup"},
}
MOVED.update({f"agentcompass.{group}{old}": f"agentcompass.{group}{new}"
              for group, names in SPLIT.items() for old, new in names.items()})

# DeprecationWarning is hidden by default outside __main__, and an extension is imported by the CLI: this one
# message is shown (once per importing line) so a user running `agentcompass run` learns of it in time.
MESSAGE = r"agentcompass\.[\w.]+ is deprecated"


def warn(old: str, stacklevel: int) -> None:
    warnings.warn(f"{old} is deprecated: it moved to {MOVED[old]}; import the extension contract from "
                  f"agentcompass.api instead (docs/extending.md). The old path goes in agentcompass {REMOVED_IN}.",
                  DeprecationWarning, stacklevel=stacklevel)


class MovedModules:
    """A meta-path finder and loader that answers an old name with the module now at its new one."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        return ModuleSpec(fullname, self) if fullname in MOVED else None

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        # stacklevel 3 skips warn() and this frame; warnings skips the import machinery's own frames itself,
        # so the warning names the extension's import line.
        warn(spec.name, stacklevel=3)
        # The module itself: the machinery keeps its name, spec and loader, as they are already set.
        return importlib.import_module(MOVED[spec.name])

    def get_code(self, fullname: str) -> Any:
        """`python -m` an old path (`python -m agentcompass.cli`): the new module's code, run as __main__."""
        warn(fullname, stacklevel=3)
        spec = importlib.util.find_spec(MOVED[fullname])
        return spec.loader.get_code(spec.name) if spec and hasattr(spec.loader, "get_code") else None

    def exec_module(self, module: ModuleType) -> None:
        """Already executed under its new name."""


def install() -> None:
    if not any(isinstance(finder, MovedModules) for finder in sys.meta_path):
        sys.meta_path.append(MovedModules())  # last: a real module of that name, if ever, wins
        if not sys.warnoptions:  # `python -W ...` (e.g. -W error) is the user's choice and stands
            warnings.filterwarnings("default", message=MESSAGE, category=DeprecationWarning)
