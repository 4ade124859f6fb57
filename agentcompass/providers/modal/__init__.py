"""The modal env: one Modal sandbox per trial, and the set-up a first run needs (setup)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentcompass.core.faces import lazy_attributes

if TYPE_CHECKING:
    from agentcompass.providers.modal.provider import ModalProvider

PUBLIC = {"ModalProvider": "agentcompass.providers.modal.provider"}
__all__ = sorted(PUBLIC)

__getattr__ = lazy_attributes(__name__, PUBLIC)
