"""terminal-bench-core 0.1.1 is the registry row's 80-task subset of the pinned commit's tasks/, applied where
terminal-bench's registry client applies it (RegistryClient._prune_task_subset on a download): to the dataset of
the recipe's source, not to a directory given at run time (`tb run --dataset-path` reads a directory whole)."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import yaml

from conftest import DATA, REPO

REGISTRY = DATA / "terminal_bench_registry" / "registry.json"


def registry_row(name: str, version: str) -> dict:
    return next(row for row in json.loads(REGISTRY.read_text()) if (row["name"], row["version"]) == (name, version))


def test_the_recipe_is_the_registry_row_of_terminal_bench_core_0_1_1() -> None:
    row = registry_row("terminal-bench-core", "0.1.1")
    source = yaml.safe_load((REPO / "recipes" / "terminal_bench.yaml").read_text())["source"]
    assert len(row["task_id_subset"]) == 80
    # The checksum a third public copy gives for the subset (README.md beside registry.json).
    assert hashlib.sha256("\n".join(sorted(row["task_id_subset"])).encode()).hexdigest() == \
        "c3a4e299ff002f3c2201de9dfdf0a7ed64a41cd1ea4253480d99502e086ce190"
    assert source["task_id_subset"] == row["task_id_subset"]
    assert (source["git"].removesuffix(".git"), source["ref"], source["subdir"]) == \
        (row["github_url"], row["commit_hash"], row["dataset_path"].removeprefix("./"))


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout.strip()


def listed(cli, benchmark: str, tmp_path: Path, repo: Path, *extra: str) -> list[str]:
    overlay = tmp_path / "source.yaml"
    overlay.write_text(f"benchmark:\n  source: {{git: 'file://{repo}', ref: {git('rev-parse', 'HEAD', cwd=repo)}, "
                       "subdir: tasks}\n")
    done = cli("list", "tasks", benchmark, "--config", str(overlay), "--json", *extra,
               env={"AGENTCOMPASS_CACHE_DIR": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["ids"]


def test_only_the_subsets_tasks_of_the_pinned_dataset_are_run(cli, tmp_path: Path) -> None:
    repo = tmp_path / "terminal-bench"
    # Two tasks the subset names (one a difficulty variant: its own directory), one it does not.
    for name in ("hello-world", "crack-7z-hash.easy", "not-in-core"):
        (repo / "tasks" / name).mkdir(parents=True)
        (repo / "tasks" / name / "task.yaml").write_text("instruction: x\ndifficulty: easy\n")
        (repo / "tasks" / name / "Dockerfile").write_text("FROM x\n")
    git("init", "-q", cwd=repo)
    git("add", ".", cwd=repo)
    git("commit", "-qm", "tasks", cwd=repo)
    assert listed(cli, "terminal_bench", tmp_path, repo) == ["crack-7z-hash.easy", "hello-world"]
    # The head row has no subset; a directory given at run time is read whole.
    assert listed(cli, "terminal_bench_head", tmp_path, repo) == ["crack-7z-hash.easy", "hello-world", "not-in-core"]
    whole = listed(cli, "terminal_bench", tmp_path, repo, "--benchmark-params", json.dumps({"path": str(repo / "tasks")}))
    assert whole == ["crack-7z-hash.easy", "hello-world", "not-in-core"]


def test_a_malformed_subset_is_a_one_line_user_error(cli, tmp_path: Path) -> None:
    (tmp_path / "tasks" / "a").mkdir(parents=True)
    (tmp_path / "tasks" / "a" / "task.yaml").write_text("instruction: x\n")
    overlay = tmp_path / "bad.yaml"
    overlay.write_text(f"benchmark:\n  source: {{git: null, path: '{tmp_path / 'tasks'}', task_id_subset: a}}\n")
    done = cli("list", "tasks", "terminal_bench_head", "--config", str(overlay), "--json")
    assert done.returncode == 2 and "source.task_id_subset must be a list of task ids" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
