"""SWE-bench grading split for a batch backend (GCP Batch: `eval --env gcp`): what runs remotely in the
instance's container, and the verdict on what comes back.

Remotely, grade.sh does what a fresh grading trial does through sandbox calls: mark the start, apply the
submission with the official harness's commands in order (a pristine tree before each try), then run the
instance's eval script into eval.log. Locally, swebench's own get_eval_report grades that eval.log, as
for every other env: the same eval script, the same log, the same verdict.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from agentcompass.core.task import Grade, Task
from agentcompass.formats.swebench.constants import (APPLY_COMMANDS, EVAL_SCRIPT_PATH, GIT_TIMEOUT, START_REF,
                                                     SUBMISSION_PATH, last_line)
from agentcompass.formats.swebench.grading import eval_script, grade_log, unresolved

if TYPE_CHECKING:
    from agentcompass.core.context import TrialContext

GRADE_SCRIPT_PATH = "/tmp/agentcompass-grade.sh"
OUTPUTS_DIR = "/tmp/agentcompass-out"  # status, verifier.log, apply_error, eval.log


@dataclass
class BatchWork:
    """One submission to grade remotely: start `image` at `workdir` with `env`, put `files` in, run `command`
    (exit 0 unless the environment failed), then fetch `outputs` (a directory)."""

    image: str
    workdir: str
    command: str
    outputs: str
    files: dict[str, str] = field(default_factory=dict)  # container path -> content
    env: dict[str, str] = field(default_factory=dict)


def grade_script(workdir: str, verify_timeout_s: float) -> str:
    """Stage, apply (swebench's GIT_APPLY_CMDS in order, as `apply_patch` does), then the eval script."""
    q = shlex.quote
    out, sub = OUTPUTS_DIR, SUBMISSION_PATH
    commands = " ".join(q(c) for c in APPLY_COMMANDS)
    timeout = int(verify_timeout_s)
    return f"""#!/bin/bash
# agentcompass: grade one SWE-bench submission in the instance's container (a GCP Batch task)
out={out}; sub={sub}
mkdir -p "$out" && : >"$out/verifier.log" || exit 3
cd {q(workdir)} || exit 3
git config --global --add safe.directory '*'; git update-ref {START_REF} HEAD || {{ echo "no git repository at {workdir}" >&2; exit 3; }}
applied=0; tries=0
for command in {commands}; do
  [ "$tries" -gt 0 ] && {{ git checkout -- . ; git clean -fdq; }}  # a failed try leaves partial changes
  timeout {int(GIT_TIMEOUT)} bash -c "$command $sub" >"$out/.stdout" 2>"$out/.stderr"; code=$?  # as exec runs it
  {{ printf '$ %s %s\\n' "$command" "$sub"; cat "$out/.stdout" "$out/.stderr"; printf '\\n'; }} >>"$out/verifier.log"
  if [ "$tries" -eq 0 ]; then
    if [ -s "$out/.stderr" ]; then cp "$out/.stderr" "$out/apply_error"; else cat "$out/.stdout" >"$out/apply_error"; fi
  fi
  tries=$((tries + 1))
  [ "$code" -eq 0 ] && {{ applied=1; break; }}
done
rm -f "$out/.stdout" "$out/.stderr"
[ "$applied" -eq 1 ] || ! git apply --check --reverse "$sub" >/dev/null 2>&1 || applied=1  # already applied
[ "$applied" -eq 1 ] || {{ echo patch_not_applied >"$out/status"; exit 0; }}
started=$(date +%s)
timeout -s KILL {timeout} bash {EVAL_SCRIPT_PATH} >"$out/eval.log" 2>&1; code=$?
if [ "$code" -eq 137 ] && [ $(($(date +%s) - started)) -ge {timeout} ]; then echo timed_out; else echo evaluated; fi >"$out/status"
"""


def batch_work(task: Task, patch: str, trial: "TrialContext") -> BatchWork | None:
    """What grading `patch` needs remotely; None when there is nothing to run (an empty patch)."""
    if not patch.strip():
        return None
    trial.write("submission.diff", patch)
    _, script = eval_script(task, None, trial)
    trial.write("eval.sh", script)
    return BatchWork(image=task.image or "", workdir=task.workdir, env=dict(task.env),
                     command=f"bash {GRADE_SCRIPT_PATH}", outputs=OUTPUTS_DIR,
                     files={SUBMISSION_PATH: patch, EVAL_SCRIPT_PATH: script,
                            GRADE_SCRIPT_PATH: grade_script(task.workdir, task.verify_timeout_s)})


def batch_grade(task: Task, trial: "TrialContext", patch: str, outputs: Path | None) -> Grade:
    """The verdict from what grade.sh wrote (`outputs`), as `grade` reaches it in mode fresh."""
    mode = "fresh"
    trial.write("patch.diff", patch)
    if outputs is None or not patch.strip():
        return unresolved(task, trial, patch, mode, f"empty patch: no changes in {task.workdir}")

    def read(name: str) -> str:
        path = outputs / name
        return path.read_bytes().decode("utf-8", errors="replace") if path.is_file() else ""

    trial.write("verifier.log", read("verifier.log"))
    status = read("status").strip()
    if status == "patch_not_applied":
        return unresolved(task, trial, patch, mode, f"patch does not apply: {last_line(read('apply_error'))}")
    log = read("eval.log")
    trial.write("eval.log", log)
    spec, _ = eval_script(task, None, trial)
    return grade_log(task, trial, patch, mode, spec, log, timed_out=status == "timed_out")
