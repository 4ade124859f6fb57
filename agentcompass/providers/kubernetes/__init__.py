"""The kubernetes env: one pod per trial on a Kubernetes cluster, through the official Python client."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentcompass.core.faces import lazy_attributes

if TYPE_CHECKING:
    from agentcompass.providers.kubernetes.provider import KubernetesProvider

PUBLIC = {"KubernetesProvider": "agentcompass.providers.kubernetes.provider"}
__all__ = sorted(PUBLIC)

__getattr__ = lazy_attributes(__name__, PUBLIC)
