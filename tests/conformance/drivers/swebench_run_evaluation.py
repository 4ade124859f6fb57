"""Runs inside the swebench 5.0.2 side venv: `python -m swebench.harness.run_evaluation` as its users run it,
in the working directory given on the command line (logs/ and the run report land there)."""

import runpy
import sys

if __name__ == "__main__":
    sys.argv = ["run_evaluation", *sys.argv[1:]]
    runpy.run_module("swebench.harness.run_evaluation", run_name="__main__")
