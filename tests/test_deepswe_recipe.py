"""The deepswe and deepswe_cost33 recipes, read against DeepSWE's own files (tests/data/deepswe: its real
dataset.toml and one real task.toml, byte-identical): every field a verdict or a bill depends on reaches the task."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import pytest

from agentcompass.core.errors import UserError
from agentcompass.formats.harbor.format import HarborFormat
from agentcompass.formats.harbor.dataset import read_manifest
from test_composition import resolved_for

DATA = Path(__file__).parent / "data" / "deepswe"
STUDY = Path(__file__).resolve().parent / "data" / "cost-bench" / "deepswe33-glm-opus48" / "tasks.txt"  # the study's own list
TASK = "abs-module-cache-flags"
BASE = "cb1b3b671d0ee9fa9da9f7b02f86967953ffd10a"
IMAGE = "public.ecr.aws/d3j8x8q7/swe-bench-202605:kh75679ajj3b8dtd7se3h7z0a1833y6r-v1.1"


def test_the_real_dataset_toml_lists_113_tasks():
    manifest = read_manifest(str(DATA / "dataset.toml"))
    assert manifest.dataset.name == "datacurve/deep-swe-1-1"
    assert len(manifest.tasks) == 113 and manifest.tasks[0].short_name == TASK
    assert all(ref.digest.startswith("sha256:") for ref in manifest.tasks)


def one_task_dataset(tmp_path: Path, manifest: bool = True) -> Path:
    """The real task.toml in a task dir; a dataset.toml holding the real one's first [[tasks]] entry."""
    root = tmp_path / "tasks"
    task = root / TASK
    (task / "tests").mkdir(parents=True)
    (task / "environment").mkdir()
    shutil.copy(DATA / TASK / "task.toml", task / "task.toml")
    (task / "instruction.md").write_text("Harden module loading.\n")
    (task / "tests" / "Dockerfile").write_text(f"FROM {IMAGE}\nCOPY test.sh /tests/test.sh\n")
    (task / "environment" / "Dockerfile").write_text("FROM scratch\n")
    if manifest:
        real = (DATA / "dataset.toml").read_text()
        first = real[: real.index("[[tasks]]", real.index("[[tasks]]") + 1)]
        (root / "dataset.toml").write_text(first)
    return root


def deepswe_recipe(tmp_path: Path, name: str = "deepswe"):
    root = one_task_dataset(tmp_path)
    return resolved_for(f"+benchmark.params.path={root}", benchmark=name).benchmark


def test_the_deepswe_recipe_reads_a_real_task_toml(tmp_path):
    recipe = deepswe_recipe(tmp_path)
    assert recipe.source["git"].endswith("datacurve-ai/deep-swe.git") and len(recipe.source["ref"]) == 40
    [task] = HarborFormat(recipe).load()
    assert task.refusal is None, task.refusal
    assert (task.id, task.image, task.workdir) == (TASK, IMAGE, "/app")
    assert task.build_context == tmp_path / "tasks" / TASK / "environment"  # built where the image cannot be pulled
    assert (task.cpus, task.memory_mb, task.storage_mb) == (2, 8192, 20480)
    assert (task.agent_timeout_s, task.verify_timeout_s, task.build_timeout_s) == (5400.0, 1800.0, 1800.0)
    # [environment]'s baseline is public (Harbor's default); both phases cut the network.
    assert task.data["networks"] == {"agent": "no-network", "verifier": "no-network"}
    assert task.network_modes == ("no-network", "public")
    assert task.data["artifacts"] == [{"service": "main", "source": "/logs/artifacts/model.patch", "exclude": []}]
    [hook] = task.data["collect"]
    assert hook["service"] == "main" and hook["timeout_sec"] == 300.0 and hook["user"] is None
    assert f"git diff --binary {BASE} HEAD > /logs/artifacts/model.patch" in hook["command"]
    verifier = task.data["verifier"]
    assert task.data["environment_mode"] == "separate" and verifier["bundled_tests"] is True
    assert verifier["build_context"].endswith(f"{TASK}/tests") and verifier["image"] is None
    assert (verifier["settings"]["cpus"], verifier["settings"]["memory_mb"]) == (2, 8192)


def test_a_task_the_manifest_lists_but_the_checkout_lacks_is_one_line(tmp_path):
    root = one_task_dataset(tmp_path)
    shutil.copy(DATA / "dataset.toml", root / "dataset.toml")  # all 113, of which one is here
    recipe = resolved_for(f"+benchmark.params.path={root}", benchmark="deepswe").benchmark
    with pytest.raises(UserError, match=r"dataset\.toml lists 112 task\(s\) with no task\.toml under .*: "
                                        r"datacurve/abs-stepped-slices, "):
        HarborFormat(recipe).load()


def test_the_cost_study_is_its_33_tasks_in_order():
    recipe = resolved_for(benchmark="deepswe_cost33").benchmark
    study = [line.strip() for line in STUDY.read_text().splitlines() if line.strip() and not line.startswith("#")]
    assert recipe.params["sample_ids"] == study and len(study) == 33
    assert recipe.source == resolved_for(benchmark="deepswe").benchmark.source  # inherited: one pinned checkout
    listed = {ref.short_name for ref in read_manifest(str(DATA / "dataset.toml")).tasks}
    assert set(study) <= listed


def test_the_study_task_toml_is_byte_identical_to_deepswes():
    """The kept copy is DeepSWE's file, not an edited one (its hook and timeouts are what the tests check)."""
    config = tomllib.loads((DATA / TASK / "task.toml").read_text())
    assert config["schema_version"] == "1.3" and config["metadata"]["base_commit_hash"] == BASE
