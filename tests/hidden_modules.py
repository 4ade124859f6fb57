"""Runs agentcompass with some top-level modules made unimportable, as if their extra were not installed:
`python -c WITHOUT MODULES ARGS...` (MODULES comma-separated); HIDE alone for other code."""

HIDE = """
import importlib.abc, runpy, sys
HIDDEN = set(sys.argv[1].split(","))
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Hide())
"""
WITHOUT = HIDE + """
sys.argv = ["agentcompass", *sys.argv[2:]]
runpy.run_module("agentcompass", run_name="__main__", alter_sys=True)
"""
