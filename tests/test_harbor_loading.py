"""Loading a Harbor dataset: which dirs are tasks, what their environment/ holds, how task.toml is read.

The loader lists dirs and reads files with plain os calls (thousands of tasks load before the first
trial); these pin down that it finds the same tasks and files a glob of */task.toml and Path checks did."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentcompass.core.errors import UserError
from agentcompass.formats.harbor.format import HarborFormat
from agentcompass.core.schema import Recipe
from harbor_factory import make_task


def load(root: Path) -> list:
    return HarborFormat(Recipe(name="h", format="harbor", source={"path": str(root)})).load()


def task(root: Path, task_id: str) -> Path:
    return make_task(root, task_id, solve="true", test="echo 1 > /logs/verifier/reward.txt")


def test_every_subdir_with_a_task_toml_is_a_task_in_name_order(tmp_path):
    for task_id in ("b", ".hidden", "a10", "a9"):
        task(tmp_path, task_id)
    (tmp_path / "notes").mkdir()  # no task.toml: not a task
    (tmp_path / "README.md").write_text("a file beside the tasks\n")
    (tmp_path / "linked").symlink_to(tmp_path / "b")  # a symlinked task dir counts, as the glob followed it
    assert [t.id for t in load(tmp_path)] == [".hidden", "a10", "a9", "b", "linked"]


def test_a_dataset_root_with_its_own_task_toml_is_one_task(tmp_path):
    root = task(tmp_path, "only")
    task(root, "nested")  # ignored: the root is the task
    [only] = load(root)
    assert only.id == "only" and only.data["dir"] == str(root) and only.data["tests"] == [str(root / "tests")]


def test_no_task_dirs_is_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="no Harbor tasks"):
        load(tmp_path)


def test_environment_files_give_the_build_context_and_the_seed(tmp_path):
    built, seeded, odd, bare = (task(tmp_path, name) for name in ("built", "seeded", "odd", "bare"))
    (built / "environment" / "Dockerfile").write_text("FROM scratch\n")
    (seeded / "environment" / "workspace").mkdir()
    (odd / "environment" / "Dockerfile").mkdir()  # a dir named Dockerfile is no Dockerfile
    (odd / "environment" / "workspace").write_text("a file named workspace is no seed dir\n")
    (bare / "environment").rmdir()  # no environment/ at all
    tasks = {t.id: t for t in load(tmp_path)}
    assert tasks["built"].build_context == built / "environment" and tasks["built"].seed_dir is None
    assert tasks["seeded"].seed_dir == seeded / "environment" / "workspace" and tasks["seeded"].build_context is None
    assert tasks["odd"].build_context is None and tasks["odd"].seed_dir is None
    assert tasks["bare"].build_context is None and tasks["bare"].seed_dir is None


def test_crlf_task_toml_reads_as_text_does(tmp_path):
    """Universal newlines, as a text-mode read gives them: a multi-line string's line ends are \\n."""
    toml = task(tmp_path, "t") / "task.toml"
    toml.write_bytes(toml.read_bytes().replace(b"\n", b"\r\n") + b'[solution]\r\nenv = { X = """a\r\nb""" }\r\n')
    [loaded] = load(tmp_path)
    assert loaded.data["solution_env"] == {"X": "a\nb"} and loaded.agent_timeout_s == 60


def test_a_task_toml_that_is_not_utf8_is_one_line_naming_it(tmp_path):
    toml = task(tmp_path, "t") / "task.toml"
    toml.write_bytes(toml.read_bytes() + b'[solution]\nenv = { X = "\xff" }\n')
    with pytest.raises(UserError, match=r"t/task\.toml: 'utf-8' codec can't decode"):
        load(tmp_path)


def test_unknown_fields_are_found_in_set_tables_and_list_items(tmp_path):
    toml = task(tmp_path, "t") / "task.toml"
    toml.write_text(toml.read_text() + '[[steps]]\nname = "one"\nodd = 1\n[steps.agent]\nstrange = 2\n')
    (tmp_path / "t" / "steps" / "one").mkdir(parents=True)
    (tmp_path / "t" / "steps" / "one" / "instruction.md").write_text("step one\n")
    [refused] = load(tmp_path)  # keys that could change a verdict: the task is refused, naming each
    assert "task.toml: steps[0].odd, steps[0].agent.strange: not in Harbor's task.toml schema" in refused.refusal


def test_a_task_toml_that_is_a_directory_is_one_line_naming_it(tmp_path):
    toml = task(tmp_path, "t") / "task.toml"
    toml.unlink()
    toml.mkdir()
    with pytest.raises(UserError, match=r"t/task\.toml: not a file"):
        load(tmp_path)


def test_a_dangling_task_toml_link_is_no_task(tmp_path):
    task(tmp_path, "t")
    (tmp_path / "gone").mkdir()
    (tmp_path / "gone" / "task.toml").symlink_to(tmp_path / "nowhere.toml")
    assert [t.id for t in load(tmp_path)] == ["t"]


def test_a_dataset_path_that_is_a_file_has_no_tasks(tmp_path):
    (tmp_path / "tasks.txt").write_text("not a dataset dir\n")
    with pytest.raises(UserError, match="no Harbor tasks"):
        load(tmp_path / "tasks.txt")
