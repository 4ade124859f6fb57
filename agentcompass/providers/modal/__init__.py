"""The modal env: one Modal sandbox per trial, and the set-up a first run needs (setup)."""

from agentcompass.providers.modal.provider import ModalProvider

__all__ = ["ModalProvider"]
