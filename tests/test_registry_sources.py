"""Harbor's dataset registry by name: a local git repository laid out like Harbor's dataset repository (task
folders under datasets/NAME/), reached through git's own `url.<base>.insteadOf` as a firewalled user would
reach a mirror, and a registry.json in the shape Harbor's JsonRegistryClient parses (DatasetSpec rows)."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from agentcompass.core.errors import UserError
from agentcompass.core.schema import Recipe
from agentcompass.formats.sources import dataset_root
from harbor_factory import make_file_tasks

UPSTREAM = "https://github.com/laude-institute/harbor-datasets.git"  # as the real registry names it; never reached


@dataclass
class World:
    repo: Path
    registry: Path
    first: str  # the commit the registry pins version 1.0 to


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=repo, check=True,
                          capture_output=True, text=True).stdout.strip()


def commit_all(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD")


def task_rows(ids: list[str], folder: str, commit: str | None) -> list[dict[str, object]]:
    return [{"name": i, "git_url": UPSTREAM, "git_commit_id": commit, "path": f"datasets/{folder}/{i}"} for i in ids]


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    repo = tmp_path / "harbor-datasets"
    hello = make_file_tasks(repo / "datasets" / "hello", 2)
    other = make_file_tasks(repo / "datasets" / "other", 1, prefix="o")
    git(repo.parent, "init", "-q", str(repo))
    first = commit_all(repo, "tasks")
    gitconfig = tmp_path / "gitconfig"
    gitconfig.write_text(f'[url "file://{repo}"]\n\tinsteadOf = {UPSTREAM}\n')
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(gitconfig))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    registry = tmp_path / "registry.json"
    registry.write_text(json.dumps([
        {"name": "hello", "version": "1.0", "description": "two tiny tasks", "tasks": task_rows(hello, "hello", first),
         "metrics": []},
        {"name": "hello", "version": "head", "description": "two tiny tasks, newest", "tasks": task_rows(hello, "hello", None)},
        {"name": "other", "version": "2.0", "description": "one task", "tasks": task_rows(other, "other", first)},
    ]))
    monkeypatch.setenv("AGENTCOMPASS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("AGENTCOMPASS_HARBOR_REGISTRY", str(registry))
    return World(repo, registry, first)


def recipe(dataset: str, version: str | None) -> Recipe:
    return Recipe(name="r", format="harbor", source={"registry": "harbor", "dataset": dataset, "version": version})


def answer_of(root: Path, task: str) -> str:
    return (root / task / "solution" / "solve.sh").read_text()


def test_a_dataset_resolves_to_its_tasks_at_the_registrys_commit(world: World):
    (world.repo / "datasets" / "hello" / "t000" / "solution" / "solve.sh").write_text("echo later\n")
    commit_all(world.repo, "a later commit the registry does not name")
    chosen = recipe("hello", "1.0")
    root = dataset_root(chosen)
    assert sorted(p.name for p in root.iterdir()) == ["t000", "t001"]  # not the other dataset's folders
    assert "echo t000 > /app/answer.txt" in answer_of(root, "t000")
    pinned = chosen.source["pinned"]
    assert (pinned["dataset"], pinned["version"]) == ("hello", "1.0")
    assert {t["git_commit_id"] for t in pinned["tasks"]} == {world.first}


def test_a_version_without_commits_is_pinned_once_and_a_later_commit_does_not_move_it(world: World):
    first_root = dataset_root(recipe("hello", None))  # no version: Harbor's choice, `head`
    (world.repo / "datasets" / "hello" / "t000" / "solution" / "solve.sh").write_text("echo later\n")
    later = commit_all(world.repo, "later")
    again = recipe("hello", "head")
    root = dataset_root(again)
    assert {t["git_commit_id"] for t in again.source["pinned"]["tasks"]} == {world.first} != {later}
    assert root == first_root and "echo t000" in answer_of(root, "t000")


def test_a_second_resolve_clones_nothing(world: World):
    first = dataset_root(recipe("hello", "head"))
    (world.repo.parent / "gitconfig").write_text("")  # the upstream now unreachable: any clone would fail
    assert dataset_root(recipe("hello", "head")) == first


def test_an_unreachable_registry_falls_back_to_the_cache_in_one_line(world: World, capsys: pytest.CaptureFixture[str]):
    dataset_root(recipe("other", "2.0"))
    world.registry.unlink()
    root = dataset_root(recipe("other", "2.0"))
    assert sorted(p.name for p in root.iterdir()) == ["o000"]
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "cannot be reached" in lines[0] and "cached copy" in lines[0]


def test_an_unreachable_registry_without_a_cache_is_one_clear_error(world: World, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("AGENTCOMPASS_HARBOR_REGISTRY", "http://127.0.0.1:9/registry.json")  # discard port: refused
    with pytest.raises(UserError, match="cannot be reached .* no cached copy"):
        dataset_root(recipe("hello", "1.0"))


@pytest.mark.parametrize("dataset,version,closest", [("hello", "1.1", "did you mean '1.0'"),
                                                      ("helo", "1.0", "did you mean 'hello'")])
def test_an_unknown_name_or_version_names_the_closest(world: World, cli, dataset: str, version: str, closest: str):
    done = cli("list", "tasks", f"harbor:{dataset}@{version}")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and closest in lines[0], done.stderr


def test_list_benchmarks_registry_shows_versions_and_task_counts(world: World, cli):
    done = cli("list", "benchmarks", "--registry", "harbor")
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines()[1:]]
    assert [r[:3] for r in rows] == [["hello@1.0", "2", "tasks"], ["hello@head", "2", "tasks"], ["other@2.0", "1", "task"]]


def test_the_registry_location_comes_from_a_private_config(world: World, cli, tmp_path: Path):
    moved = tmp_path / "mirror" / "registry.json"
    moved.parent.mkdir()
    world.registry.rename(moved)
    private = tmp_path / "private.yaml"
    private.write_text(f"registries:\n  harbor:\n    url: file://{moved}\n")
    done = cli("list", "tasks", "harbor:other@2.0", "--config", str(private),
               env={"AGENTCOMPASS_HARBOR_REGISTRY": str(tmp_path / "nowhere.json")})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["o000"]


def test_a_registry_dataset_runs_end_to_end_and_run_json_records_its_pins(world: World, cli, tmp_path: Path):
    done = cli("run", "harbor:hello@1.0", "oracle", "none", "--env", "local", "--results-dir", str(tmp_path / "runs"),
               "--run-name", "reg", "benchmark.runs_on_host=true")
    assert done.returncode == 0, done.stderr
    [run_json] = (tmp_path / "runs").rglob("run.json")
    info = json.loads(run_json.read_text())
    pinned = info["config"]["benchmark"]["source"]["pinned"]
    assert [(t["path"], t["git_commit_id"]) for t in pinned["tasks"]] == [
        ("datasets/hello/t000", world.first), ("datasets/hello/t001", world.first)]
    summary = json.loads((run_json.parent / "summary.json").read_text())
    assert (summary["tasks"], summary["passed"], summary["errors"]) == (2, 2, 0), summary


def test_a_task_path_that_leaves_its_repository_is_refused(world: World, tmp_path: Path):
    (tmp_path / "secret").mkdir()  # what a hostile registry entry would copy in as a "task"
    rows = json.loads(world.registry.read_text())
    rows[2]["tasks"][0]["path"] = "datasets/../../secret"
    world.registry.write_text(json.dumps(rows))
    with pytest.raises(UserError, match="leaves its repository"):
        dataset_root(recipe("other", "2.0"))


def test_a_recorded_pinned_block_reproduces_the_tasks_without_the_registry(world: World):
    first = recipe("hello", "head")
    dataset_root(first)
    world.registry.unlink()
    for cached in (Path(world.registry.parent) / "cache" / "registries").iterdir():
        cached.unlink()  # neither the registry nor its cached copy nor the pins: only what run.json recorded
    again = Recipe(name="r", format="harbor", source={"registry": "harbor", "dataset": "hello",
                                                      "pinned": first.source["pinned"]})
    assert sorted(p.name for p in dataset_root(again).iterdir()) == ["t000", "t001"]


def test_a_users_recipe_can_take_a_subset_of_a_registry_dataset(world: World, cli, tmp_path: Path):
    recipes = tmp_path / "mine" / "recipes"
    recipes.mkdir(parents=True)
    (recipes / "hello_one.yaml").write_text('name: hello_one\nformat: harbor\n'
                                            'source: {registry: harbor, dataset: hello, version: "1.0"}\n'
                                            'params: {sample_ids: [t001]}\n')
    private = tmp_path / "private.yaml"  # the registry's location from a private --config, for a recipe too
    private.write_text(f"registries:\n  harbor:\n    url: {world.registry}\n")
    done = cli("list", "tasks", "hello_one", "--config-dir", str(tmp_path / "mine"), "--config", str(private),
               env={"AGENTCOMPASS_HARBOR_REGISTRY": str(tmp_path / "nowhere.json")})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["t001"]


def test_a_registry_served_over_http_is_read_and_then_its_cached_copy(world: World, capsys: pytest.CaptureFixture[str],
                                                                      monkeypatch: pytest.MonkeyPatch):
    import functools
    import http.server

    from hub_standin import served

    quiet = type("Quiet", (http.server.SimpleHTTPRequestHandler,), {"log_message": lambda self, *args: None})
    with served(functools.partial(quiet, directory=str(world.registry.parent))) as base:  # type: ignore[arg-type]
        monkeypatch.setenv("AGENTCOMPASS_HARBOR_REGISTRY", f"{base}/registry.json")
        assert sorted(p.name for p in dataset_root(recipe("hello", "1.0")).iterdir()) == ["t000", "t001"]
    capsys.readouterr()
    assert sorted(p.name for p in dataset_root(recipe("other", "2.0")).iterdir()) == ["o000"]
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "cannot be reached" in lines[0]


def test_the_hub_api_resolves_lists_and_names_the_closest_version(world: World, cli, monkeypatch: pytest.MonkeyPatch):
    from hub_standin import hub_standin

    keys: list[str] = []
    monkeypatch.setenv("HARBOR_SUPABASE_PUBLISHABLE_KEY", "pk-test")
    with hub_standin(json.loads(world.registry.read_text()), keys) as base:
        monkeypatch.setenv("AGENTCOMPASS_HARBOR_REGISTRY", f"hub+{base}")
        chosen = recipe("hello", None)  # no version: `head`, as Harbor picks it
        assert sorted(p.name for p in dataset_root(chosen).iterdir()) == ["t000", "t001"]
        assert chosen.source["pinned"]["version"] == "head" and len(chosen.source["pinned"]["tasks"]) == 2
        listed = cli("list", "benchmarks", "--registry", "harbor")
        wrong = cli("list", "tasks", "harbor:hello@1.1")
    assert listed.returncode == 0, listed.stderr
    assert [line.split()[:2] for line in listed.stdout.splitlines()[1:]] == [["hello@1.0", "2"], ["hello@head", "2"],
                                                                              ["other@2.0", "1"]]
    assert wrong.returncode == 2 and "did you mean '1.0'" in wrong.stderr and len(wrong.stderr.strip().splitlines()) == 1
    assert set(keys) == {"pk-test"}


def add_linked_task(world: World, link_target: str) -> None:
    """A dataset `links@1.0` of one task whose solution/extra.sh is a link to `link_target`."""
    task = make_file_tasks(world.repo / "datasets" / "links", 1, prefix="l")[0]
    (world.repo / "datasets" / "links" / task / "solution" / "extra.sh").symlink_to(link_target)
    commit = commit_all(world.repo, "a task with a link")
    rows = json.loads(world.registry.read_text())
    world.registry.write_text(json.dumps([*rows, {"name": "links", "version": "1.0", "description": "",
                                                  "tasks": task_rows([task], "links", commit)}]))


@pytest.mark.parametrize("target", ["/etc/hostname", "../../../../../../../../etc/hostname", "../../../hello/t000/task.toml"])
def test_a_task_link_that_reaches_out_of_its_task_is_refused(world: World, target: str):
    add_linked_task(world, target)
    with pytest.raises(UserError, match="links must be relative and stay inside the task"):
        dataset_root(recipe("links", "1.0"))


def test_a_link_inside_the_task_is_copied_as_the_file_it_names(world: World):
    add_linked_task(world, "../tests/test.sh")  # the honest control: Harbor materializes it the same way
    extra = dataset_root(recipe("links", "1.0")) / "l000" / "solution" / "extra.sh"
    assert not extra.is_symlink() and "/logs/verifier/reward.txt" in extra.read_text()


SHIPPED_OVER_THE_REGISTRY = {  # recipe -> the dataset and version it names (None: the registry's default)
    "terminal_bench_2_1": ("terminal-bench", "2.1"), "terminal_bench_pro": ("terminal-bench-pro", "1.0"),
    "swebench_pro_harbor": ("swebenchpro", "1.0"), "swtbench_verified": ("swtbench-verified", None),
    "aider_polyglot": ("aider-polyglot", "1.0"), "swesmith": ("swesmith", None), "swe_rebench": ("swe-rebench", None),
    "compilebench": ("compilebench", None), "livecodebench": ("livecodebench", None),
}


@pytest.mark.parametrize("shipped", sorted(SHIPPED_OVER_THE_REGISTRY))
def test_each_shipped_registry_recipe_resolves_through_a_registry_that_holds_its_dataset(world: World, cli, shipped):
    dataset, version = SHIPPED_OVER_THE_REGISTRY[shipped]
    rows = json.loads(world.registry.read_text())
    rows.append({"name": dataset, "version": version or "1.0", "description": f"stand-in for {dataset}",
                 "tasks": rows[0]["tasks"]})
    world.registry.write_text(json.dumps(rows))
    listed = cli("list", "tasks", shipped)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split() == [t["name"] for t in rows[0]["tasks"]]
    marks = cli("list", "benchmarks").stdout
    assert any(line.split()[0] == shipped and "from the harbor registry" in line for line in marks.splitlines()[1:])
