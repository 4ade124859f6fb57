"""What a SWE-bench trial and a batch grading job (batch.py) agree on: the paths in the instance's container,
the official harness's patch commands and their timeout, and how a failed command is reported in one line.

A leaf: both the format and its batch grading import it, so neither imports the other for them."""

from __future__ import annotations

PATCH_NOT_APPLIED = "patch_not_applied"  # AgentOutcome.exit_status: a submitted patch failed to apply
START_REF = "refs/agentcompass/start"  # what the harness started from; survives agent commits
SUBMISSION_PATH = "/tmp/agentcompass-submission.diff"
PATCH_PATH = "/tmp/agentcompass-patch.diff"  # the tree's diff, fetched whole (an exec's output is capped)
EVAL_SCRIPT_PATH = "/tmp/agentcompass-eval.sh"
EVAL_LOG_PATH = "/tmp/agentcompass-eval.log"
ASSETS_DIR = "/image_assets"  # where the official harness stages image_assets
# The order swebench.harness.run_evaluation tries (its GIT_APPLY_CMDS), on a pristine tree each time.
APPLY_COMMANDS = (
    "git apply --verbose",
    "git apply --verbose --3way",
    "git apply --verbose --reject",
    "patch --batch --forward --fuzz=5 -p1 -i",
)
GIT_TIMEOUT = 600.0


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"
