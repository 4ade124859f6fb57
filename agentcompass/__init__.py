"""agentcompass: run any coding-agent benchmark with any harness, model and environment."""

from agentcompass.core.moved import install as _keep_moved_paths

__version__ = "0.1.0"

_keep_moved_paths()  # the paths the package split moved still import, with a DeprecationWarning (core/moved.py)
