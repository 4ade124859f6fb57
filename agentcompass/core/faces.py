"""A package's face: its public names, imported on first use (PEP 562), so that importing one module of
the package (`python -m` of a helper, a test of one module) does not import the whole package first."""

from __future__ import annotations

import importlib
from typing import Any, Callable


def lazy_attributes(package: str, public: dict[str, str]) -> Callable[[str], Any]:
    """The package's module-level `__getattr__`: `public` maps each name to the module that defines it."""

    def attribute(name: str) -> Any:
        if name not in public:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(public[name]), name)

    return attribute
