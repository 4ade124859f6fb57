"""CooperBench grading, as its own evaluator does it (cooperbench/eval/sandbox.py), in one sandbox of the task image.

Each agent's patch loses its test files first. single and solo: the task's runner.sh applies the patch and
a feature's tests.patch and runs the tests. coop: each agent's patch is applied on its own branch from the
base commit, the branches are merged (git's merge, then with the union driver if that conflicts), the merge
status is recorded (clean, conflicts, or missing_input when a patch did not apply), and both features' tests
run on the merged tree. A feature passes when runner.sh exits 0 having run at least one passing test.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentcompass.core.errors import InfraError

if TYPE_CHECKING:
    from agentcompass.core.sandbox import Sandbox
    from agentcompass.core.context import TrialContext

REPO_DIR = "/workspace/repo"
PATCHES_DIR = "/patches"  # where runner.sh reads its patches
RUNNER = "/usr/local/bin/runner.sh"
GIT_TIMEOUT = 600.0
TEST_PATH_MARKS = ("/test_", "/tests/", "_test.py", "/test/", "tests.py")  # CooperBench's _filter_test_files

# Apply both patches on branches agent1 and agent2 from the base commit, then merge agent1 into agent2:
# naively, and with `* merge=union` when that conflicts. The last lines say what happened.
MERGE_SCRIPT = r"""
cd {repo}
git config user.email eval@agentcompass.local; git config user.name "agentcompass eval"
base=$(git rev-parse HEAD)
apply_patch() {{
    if [ -s {patches}/patch$1.patch ]; then
        if git apply {patches}/patch$1.patch || git apply --3way {patches}/patch$1.patch; then echo PATCH$1=applied
        else echo PATCH$1=failed; git reset -q --hard; git clean -fdq; fi
    else echo PATCH$1=skipped; fi
}}
git checkout -q -b agent1 && apply_patch 1 && git add -A && git commit -qm "agent1" --allow-empty
git checkout -q "$base" && git checkout -q -b agent2 && apply_patch 2 && git add -A && git commit -qm "agent2" --allow-empty
if git merge agent1 --no-commit --no-ff; then
    echo MERGE=clean; git commit -qm merged --allow-empty
else
    echo MERGE=conflicts; git merge --abort; git reset -q --hard
    echo "* merge=union" >> .gitattributes
    if git merge agent1 --no-commit --no-ff; then echo UNION=clean; git commit -qm union --allow-empty
    else echo UNION=conflicts; git merge --abort; fi
    git checkout -- .gitattributes 2>/dev/null || rm -f .gitattributes
fi
git diff "$base" HEAD > {patches}/merged.patch
git checkout -q --force "$base"
"""

# Back to the base commit, then the task's runner (which applies TEST_PATCH and FEATURE_PATCH from /patches).
TEST_SCRIPT = """
cd {repo} && rm -f .git/index.lock && git checkout -q --force {base} && git reset -q --hard {base} && git clean -fdxq
bash {runner} {tests} {patch}
"""


@dataclass
class FeatureResult:
    feature: int
    passed: bool
    exit_code: int
    tests_passed: int
    tests_failed: int

    def as_dict(self) -> dict[str, Any]:
        return {"feature": self.feature, "passed": self.passed, "exit_code": self.exit_code,
                "tests_passed": self.tests_passed, "tests_failed": self.tests_failed}


def filter_test_files(patch: str) -> str:
    """The patch without the files CooperBench counts as tests (an agent may not change the graders' tests)."""
    if not patch:
        return patch
    kept, skipping = [], False
    for line in patch.split("\n"):
        if line.startswith("diff --git"):
            skipping = any(mark in line for mark in TEST_PATH_MARKS)
        if not skipping:
            kept.append(line)
    result = "\n".join(kept)
    return result if not result or result.endswith("\n") else result + "\n"


def parse_counts(output: str) -> tuple[int, int]:
    """(passed, failed) from the test output: jest/vitest, pytest, go test, cargo, as CooperBench parses them."""
    jest = re.search(r"Tests:\s*(?:(\d+)\s*failed,\s*)?(\d+)\s*passed", output)
    if jest:
        return int(jest.group(2)), int(jest.group(1) or 0)
    passed = re.search(r"(\d+) passed", output)
    failed = re.search(r"(\d+) failed", output)
    errors = re.search(r"(\d+) error", output)
    counts = (int(passed.group(1)) if passed else 0,
              (int(failed.group(1)) if failed else 0) + (int(errors.group(1)) if errors else 0))
    if any(counts):
        return counts
    go_pass, go_fail = len(re.findall(r"--- PASS:", output)), len(re.findall(r"--- FAIL:", output))
    if go_pass or go_fail:
        return go_pass, go_fail
    ok_packages = len(re.findall(r"^ok\s+\S+", output, re.MULTILINE))
    failed_packages = len(re.findall(r"^FAIL\s+\S+", output, re.MULTILINE))
    if ok_packages or failed_packages:
        return (ok_packages if not failed_packages else 0), failed_packages
    cargo = re.search(r"test result:.*?(\d+) passed.*?(\d+) failed", output)
    return (int(cargo.group(1)), int(cargo.group(2))) if cargo else (0, 0)


def put_patch(sandbox: "Sandbox", trial: "TrialContext", name: str, text: str) -> None:
    sandbox.upload(trial.write(f"grading/{name}", text), f"{PATCHES_DIR}/{name}")


def base_commit(sandbox: "Sandbox") -> str:
    result = sandbox.exec(f"cd {REPO_DIR} && git rev-parse HEAD", timeout=GIT_TIMEOUT)
    if not result.ok:
        raise InfraError(f"no git repository at {REPO_DIR} in the grading sandbox: {result.stderr.strip()[-300:]}")
    return result.stdout.strip()


def run_feature_tests(sandbox: "Sandbox", trial: "TrialContext", feature: int, tests: str, patch: str,
                      base: str, timeout: float | None) -> FeatureResult:
    """runner.sh TESTS [PATCH] on a clean base checkout; its output is feature<N>.log in the trial dir."""
    script = TEST_SCRIPT.format(repo=REPO_DIR, base=shlex.quote(base), runner=RUNNER, tests=shlex.quote(tests),
                                patch=shlex.quote(patch) if patch else "")
    result = sandbox.exec(script, timeout=timeout)
    output = result.stdout + result.stderr
    trial.write(f"feature{feature}.log", output)
    passed, failed = parse_counts(output)
    code = 124 if result.timed_out else result.exit_code
    return FeatureResult(feature, code == 0 and passed > 0, code, passed, failed)


def merge(sandbox: "Sandbox", trial: "TrialContext", patch1: str, patch2: str) -> dict[str, Any]:
    """Merge the agents' patches as CooperBench does; merged.patch is left in /patches for the tests."""
    put_patch(sandbox, trial, "patch1.patch", patch1)
    put_patch(sandbox, trial, "patch2.patch", patch2)
    result = sandbox.exec(MERGE_SCRIPT.format(repo=REPO_DIR, patches=PATCHES_DIR), timeout=GIT_TIMEOUT)
    output = result.stdout + result.stderr
    trial.write("merge.log", output)
    marks = dict(line.split("=", 1) for line in output.splitlines() if re.fullmatch(r"(PATCH[12]|MERGE|UNION)=\w+", line))
    if "MERGE" not in marks:
        raise InfraError(f"the merge script stopped early: {output.strip()[-300:]}")
    apply_status = {"agent1": marks.get("PATCH1", "failed"), "agent2": marks.get("PATCH2", "failed")}
    status = "missing_input" if "failed" in apply_status.values() else marks["MERGE"]
    strategy = "naive" if marks["MERGE"] == "clean" else "union"
    merged = sandbox.exec(f"cat {PATCHES_DIR}/merged.patch", timeout=GIT_TIMEOUT).stdout
    trial.write("merged.diff", merged)
    return {"merge_status": status, "merge_strategy": strategy, "union_clean": marks.get("UNION", "clean") == "clean",
            "apply_status": apply_status, "merged_diff": merged}
