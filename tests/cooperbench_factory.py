"""A tiny CooperBench-layout dataset, built offline: one task of three features over a two-file repository.

feature1 adds `mul` at the end of calc.py, feature2 adds `whisper` to text.py, feature3 adds `neg` at the
end of calc.py: the gold patches of 1 and 2 merge cleanly, those of 1 and 3 conflict under a plain git
merge and merge with the union driver; combined.patch is all three, as the pull request. Each feature's tests.patch adds tests/test_f<N>.sh; runner.sh
applies the patches from /patches as CooperBench's runners do and prints pytest's summary line.
The patches are made with real git from the files below, so they apply as CooperBench's do.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO_NAME = "tiny_calc_task"
TASK = "task7"
BASE_FILES = {
    "calc.py": "def add(a, b):\n    return a + b\n",
    "text.py": "def shout(s):\n    return s.upper()\n",
    "tests/test_base.sh": 'python3 -c "from calc import add; assert add(1, 2) == 3"\n',
}
FEATURES = {
    1: ("Add `mul(a, b)` to calc.py, returning the product of a and b.",
        {"calc.py": BASE_FILES["calc.py"] + "\n\ndef mul(a, b):\n    return a * b\n"},
        'python3 -c "from calc import mul; assert mul(2, 3) == 6"\n'),
    2: ("Add `whisper(s)` to text.py, returning s in lower case.",
        {"text.py": BASE_FILES["text.py"] + "\n\ndef whisper(s):\n    return s.lower()\n"},
        'python3 -c "from text import whisper; assert whisper(\'HI\') == \'hi\'"\n'),
    3: ("Add `neg(a)` to calc.py, returning minus a.",
        {"calc.py": BASE_FILES["calc.py"] + "\n\ndef neg(a):\n    return -a\n"},
        'python3 -c "from calc import neg; assert neg(4) == -4"\n'),
}
RUNNER = """#!/bin/bash
set -e
cleanup() { git reset -q --hard HEAD; git clean -fdxq; }
trap cleanup EXIT
TEST_PATCH="$1"; FEATURE_PATCH="$2"
cd /workspace/repo
git reset -q --hard HEAD; git clean -fdxq
if [[ -n "$FEATURE_PATCH" ]]; then git apply --ignore-whitespace "/patches/$FEATURE_PATCH" || git apply --3way "/patches/$FEATURE_PATCH"; fi
git apply --ignore-whitespace "/patches/$TEST_PATCH"
passed=0; failed=0
for t in tests/test_*.sh; do
    if sh "$t"; then passed=$((passed+1)); echo "PASSED $t"; else failed=$((failed+1)); echo "FAILED $t"; fi
done
echo "====== $failed failed, $passed passed ======"
[ "$failed" -eq 0 ]
"""
DOCKERFILE = """ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}
COPY repo /workspace/repo
RUN cd /workspace/repo && git init -q && git add -A && git -c user.email=t@t -c user.name=t commit -qm base
COPY runner.sh /usr/local/bin/
RUN chmod +x /usr/local/bin/runner.sh
WORKDIR /workspace/repo
ENTRYPOINT ["/usr/local/bin/runner.sh"]
"""


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def write_files(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def diff_of(work: Path, files: dict[str, str]) -> str:
    """The patch that turns the base into `files` (new files included), as `git diff` writes it."""
    write_files(work, files)
    git(work, "add", "-A")
    patch = git(work, "diff", "--cached")
    git(work, "reset", "-q", "--hard")
    git(work, "clean", "-fdq")
    return patch


def make_dataset(root: Path) -> Path:
    """The dataset dir (root/dataset) with subsets/tiny.json naming the pair 1+3."""
    dataset = root / "dataset"
    task = dataset / REPO_NAME / TASK
    write_files(task / "repo", BASE_FILES)
    work = root / "work"
    write_files(work, BASE_FILES)
    git(work, "init", "-q")
    git(work, "add", "-A")
    git(work, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "base")
    for number, (text, changes, test) in FEATURES.items():
        feature = task / f"feature{number}"
        feature.mkdir(parents=True)
        (feature / "feature.md").write_text(f"**Title**: feature {number}\n\n{text}\n")
        (feature / "feature.patch").write_text(diff_of(work, changes))
        (feature / "tests.patch").write_text(diff_of(work, {f"tests/test_f{number}.sh": test}))
    combined = {"calc.py": BASE_FILES["calc.py"] + "\n\ndef mul(a, b):\n    return a * b\n\n\ndef neg(a):\n    return -a\n",
                "text.py": FEATURES[2][1]["text.py"]}
    (task / "combined.patch").write_text(diff_of(work, combined))
    (task / "runner.sh").write_text(RUNNER)
    (task / "Dockerfile").write_text(DOCKERFILE)
    (dataset / "subsets").mkdir()
    (dataset / "subsets" / "tiny.json").write_text(
        '{"name": "tiny", "tasks": [{"repo": "%s", "task_id": 7, "pairs": [[1, 3]]}]}\n' % REPO_NAME)
    return dataset


def make_config_dir(root: Path, dataset: Path, base_image: str) -> Path:
    """A user config dir whose recipe runs the fixture, building its Dockerfile on the offline base."""
    recipes = root / "config" / "recipes"
    recipes.mkdir(parents=True)
    (recipes / "cooperbench_tiny.yaml").write_text(f"""defaults: [cooperbench, _self_]
name: cooperbench_tiny
description: the offline CooperBench fixture
params: {{path: {dataset}}}
image: null
build_args: {{BASE_IMAGE: {base_image}}}
timeouts: {{agent: 300, verify: 300}}
""")
    return root / "config"
