"""SWE-bench format without a Docker engine: loading real Lite rows, image names, instructions,
selection, classic eval scripts, predictions files, patch extraction on the local provider, and the CLI."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from agentcompass.core.errors import UserError
from agentcompass.formats.swebench.format import SwebenchFormat
from agentcompass.formats.swebench.data import classic_eval_script, instance_for_test_spec
from agentcompass.harnesses.predictions import read_predictions
from agentcompass.providers.local.provider import LocalProvider
from agentcompass.core.sandbox import SandboxSpec
from agentcompass.core.schema import Recipe
from agentcompass.core.task import Task

SAMPLE = Path(__file__).parent / "data" / "swebench-lite-sample.json"
SAMPLE_IDS = ["django__django-16255", "sympy__sympy-13031", "pytest-dev__pytest-11143",
              "scikit-learn__scikit-learn-13584", "django__django-15781"]


def recipe(**fields) -> Recipe:
    return Recipe(**{"name": "swebench_lite", "format": "swebench", **fields})


def load(path: Path, **params) -> list[Task]:
    return SwebenchFormat(recipe(params={"path": str(path), **params})).load()


@pytest.fixture
def hub_style_jsonl(tmp_path: Path) -> Path:
    """The sample as the hub serves it: test lists as JSON-encoded strings, one row per line."""
    rows = json.loads(SAMPLE.read_text())
    for row in rows:
        row["FAIL_TO_PASS"], row["PASS_TO_PASS"] = json.dumps(row["FAIL_TO_PASS"]), json.dumps(row["PASS_TO_PASS"])
    path = tmp_path / "lite.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_loads_list_rows_from_json_and_string_rows_from_jsonl(tmp_path, hub_style_jsonl):
    copy = tmp_path / "lite.json"
    shutil.copy(SAMPLE, copy)
    from_json, from_jsonl = load(copy), load(hub_style_jsonl)
    assert [t.id for t in from_json] == SAMPLE_IDS == [t.id for t in from_jsonl]
    raw = {r["instance_id"]: r for r in json.loads(SAMPLE.read_text())}
    for a, b in zip(from_json, from_jsonl):
        assert a.data["FAIL_TO_PASS"] == raw[a.id]["FAIL_TO_PASS"] == b.data["FAIL_TO_PASS"]
        assert a.data["PASS_TO_PASS"] == raw[a.id]["PASS_TO_PASS"] == b.data["PASS_TO_PASS"]
    assert from_json[2].data["FAIL_TO_PASS"] == [
        "testing/test_assertrewrite.py::TestIssue11140::test_constant_not_picked_as_module_docstring"]


def test_image_names_workdir_and_timeouts():
    tasks = {t.id: t for t in load(SAMPLE)}
    assert tasks["django__django-16255"].image == "swebench/sweb.eval.x86_64.django_1776_django-16255:latest"
    assert tasks["scikit-learn__scikit-learn-13584"].image == \
        "swebench/sweb.eval.x86_64.scikit-learn_1776_scikit-learn-13584:latest"
    assert {t.workdir for t in tasks.values()} == {"/testbed"}
    templated = SwebenchFormat(recipe(image="Mirror.example/SWE/{instance_id_1776}:v1", params={"path": str(SAMPLE)})).load()
    assert templated[1].image == "mirror.example/swe/sympy_1776_sympy-13031:v1"


def test_the_rows_own_image_wins(tmp_path):
    rows = json.loads(SAMPLE.read_text())[:1]
    rows[0]["image"] = "registry.example/Own:tag"
    (tmp_path / "one.json").write_text(json.dumps(rows))
    assert load(tmp_path / "one.json")[0].image == "registry.example/Own:tag"


def test_instruction_is_the_problem_statement_through_the_template():
    statement = json.loads(SAMPLE.read_text())[0]["problem_statement"]
    plain = SwebenchFormat(recipe(instruction_template="{problem_statement}", params={"path": str(SAMPLE)})).load()
    assert plain[0].instruction == statement
    custom = SwebenchFormat(recipe(instruction_template="Fix {repo} at {workdir}:\n{problem_statement}",
                                   params={"path": str(SAMPLE)})).load()
    assert custom[0].instruction == f"Fix django/django at /testbed:\n{statement}"
    with pytest.raises(UserError, match="unknown field"):
        SwebenchFormat(recipe(instruction_template="{nope}", params={"path": str(SAMPLE)})).load()


def test_selection_params():
    assert [t.id for t in load(SAMPLE, filter="^django")] == ["django__django-16255", "django__django-15781"]
    assert [t.id for t in load(SAMPLE, sample_ids=["sympy__sympy-13031"])] == ["sympy__sympy-13031"]
    assert len(load(SAMPLE, limit=2)) == 2
    shuffled = [t.id for t in load(SAMPLE, shuffle=True, seed=3)]
    assert sorted(shuffled) == sorted(SAMPLE_IDS) and shuffled == [t.id for t in load(SAMPLE, shuffle=True, seed=3)]
    with pytest.raises(UserError, match="unknown sample_ids"):
        load(SAMPLE, sample_ids=["nope__nope-1"])


def test_bad_sources_are_user_errors(tmp_path):
    (tmp_path / "bad.json").write_text('{"not": "a list"}')
    with pytest.raises(UserError, match="list of SWE-bench rows"):
        load(tmp_path / "bad.json")
    (tmp_path / "short.json").write_text('[{"instance_id": "a__b-1"}]')
    with pytest.raises(UserError, match="lacks repo"):
        load(tmp_path / "short.json")
    with pytest.raises(UserError, match="does not exist"):
        load(tmp_path / "missing.jsonl")
    rows = json.loads(SAMPLE.read_text())[:1]
    rows[0]["repo"] = "someone/unknown"
    (tmp_path / "unknown.json").write_text(json.dumps(rows))
    with pytest.raises(UserError, match="no eval_script"):
        load(tmp_path / "unknown.json")


def test_classic_rows_get_the_official_eval_script():
    """The eval script SWE-bench's harness ran for these Lite rows (test command, directives, markers)."""
    from swebench.harness.utils import make_test_spec

    tasks = {t.id: t for t in load(SAMPLE)}
    django = make_test_spec(instance_for_test_spec(tasks["django__django-16255"].data, "img"))
    assert django.log_parser == "parse_log_django" and django.eval_type == "pass_and_fail"
    script = django.eval_script
    assert ("./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1 "
            "sitemaps_tests.test_http sitemaps_tests.urls.http") in script
    assert "git checkout 444b6da7cc229a58a2c476a52e45233001dc7073 tests/sitemaps_tests/test_http.py " \
           "tests/sitemaps_tests/urls/http.py" in script
    assert script.index(">>>>> Start Test Output") < script.index("runtests.py") < script.index(">>>>> End Test Output")
    sympy = make_test_spec(instance_for_test_spec(tasks["sympy__sympy-13031"].data, "img"))
    assert "bin/test -C --verbose sympy/matrices/tests/test_sparse.py" in sympy.eval_script
    assert sympy.log_parser == "parse_log_sympy"
    pytest_row = make_test_spec(instance_for_test_spec(tasks["pytest-dev__pytest-11143"].data, "img"))
    assert "\npytest -rA testing/test_assertrewrite.py\n" in pytest_row.eval_script


def test_predictions_files_in_every_form(tmp_path):
    rows = [{"instance_id": "a__a-1", "model_name_or_path": "m", "model_patch": "p1"},
            {"instance_id": "b__b-2", "model_name_or_path": "m", "model_patch": None}]
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "list.json").write_text(json.dumps(rows))
    (tmp_path / "dict.json").write_text(json.dumps({r["instance_id"]: {k: v for k, v in r.items() if k != "instance_id"}
                                                    for r in rows}))
    for name in ("p.jsonl", "list.json", "dict.json"):
        found = read_predictions(tmp_path / name)
        assert sorted(found) == ["a__a-1", "b__b-2"] and found["a__a-1"]["model_patch"] == "p1"
    (tmp_path / "bad.json").write_text('[{"model_patch": "x"}]')
    with pytest.raises(UserError, match="instance_id"):
        read_predictions(tmp_path / "bad.json")


class Trial:
    def __init__(self, path: Path) -> None:
        self.dir, self.labels = path, {"model": "m"}

    def write(self, name: str, text: str) -> Path:
        (self.dir / name).write_text(text)
        return self.dir / name

    def append(self, name: str, text: str) -> None:
        with open(self.dir / name, "a") as handle:
            handle.write(text)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@e", *args], cwd=repo, check=True,
                          capture_output=True, text=True).stdout


def seeded_format(tmp_path: Path, **params: object) -> SwebenchFormat:
    """One row, x__x-1, whose checkout (a.py, one commit) is staged at /testbed where no image is used."""
    repos = tmp_path / "repos" / "x__x-1"
    repos.mkdir(parents=True)
    (repos / "a.py").write_text("A = 1\n")
    git(repos, "init", "-q")
    git(repos, "add", "-A")
    git(repos, "commit", "-q", "-m", "base")
    row = {"instance_id": "x__x-1", "repo": "x/x", "base_commit": git(repos, "rev-parse", "HEAD").strip(),
           "test_patch": "", "patch": "", "problem_statement": "", "FAIL_TO_PASS": [], "PASS_TO_PASS": [],
           "eval_script": "true"}
    (tmp_path / "rows.json").write_text(json.dumps([row]))
    return SwebenchFormat(recipe(runs_on_host=True, params={"path": str(tmp_path / "rows.json"),
                                                           "repos_dir": str(tmp_path / "repos"), **params}))


def test_patch_has_new_files_and_agent_commits_but_no_scratch(tmp_path):
    """The diff runs against the commit the trial started from, on the local provider's /testbed."""
    fmt = seeded_format(tmp_path, patch_exclude=[".scratch*"])
    task = fmt.load()[0]
    sandbox = LocalProvider(isolation="auto").open(SandboxSpec(name="t", workdir="/testbed", runs_on_host=True))
    try:
        fmt.stage(task, sandbox, Trial(tmp_path))
        script = ("echo 'A = 2' > a.py && git -c user.name=a -c user.email=a@e commit -qam agent && "
                  "echo 'B = 1' > b.py && echo notes > .scratch-notes.md")
        assert sandbox.exec(script).ok
        patch = fmt.extract_patch(task, sandbox)
        status = sandbox.exec("git status --porcelain").stdout
    finally:
        sandbox.close()
    assert "+A = 2" in patch and "diff --git a/b.py b/b.py" in patch and "+B = 1" in patch
    assert ".scratch-notes" not in patch
    assert "?? b.py" in status  # the repository's own index is left as the harness left it


def test_config_show_and_list(cli):
    shown = cli("config", "show", "swebench_lite", "oracle", "none", "--benchmark-params", json.dumps({"path": str(SAMPLE)}))
    assert shown.returncode == 0, shown.stderr
    assert "name: swebench_lite" in shown.stdout and "hf: SWE-bench/SWE-bench_Lite" in shown.stdout
    assert f"path: {SAMPLE}" in shown.stdout and "workdir: /testbed" in shown.stdout
    listed = cli("list", "benchmarks")
    for name in ("swebench", "swebench_lite", "swebench_verified", "swebench_multilingual"):
        assert f"  {name} " in listed.stdout
    verified = cli("config", "show", "swebench_verified", "oracle", "none")
    assert "hf: SWE-bench/SWE-bench_Verified" in verified.stdout and "format: swebench" in verified.stdout


def test_eval_bad_input_is_one_line_exit_2(cli, tmp_path):
    missing = cli("eval", "swebench_lite", "--predictions", str(tmp_path / "nope.jsonl"))
    assert missing.returncode == 2 and missing.stderr.startswith("error: cannot read predictions")
    (tmp_path / "p.jsonl").write_text(json.dumps({"instance_id": "nope__nope-1", "model_patch": ""}) + "\n")
    (tmp_path / "local.yaml").write_text("benchmark:\n  runs_on_host: true\n")
    unknown = cli("eval", "swebench_lite", "--predictions", str(tmp_path / "p.jsonl"), "--config", str(tmp_path / "local.yaml"),
                  "--results-dir", str(tmp_path / "res"), "--benchmark-params", json.dumps({"path": str(SAMPLE)}))
    assert unknown.returncode == 2 and "no prediction is for an instance of the benchmark's selection (e.g. nope__nope-1)" \
        in unknown.stderr, unknown.stderr
    same = cli("eval", "swebench_lite", "--predictions", str(tmp_path / "p.jsonl"), "--results-dir", str(tmp_path / "res"),
               "--benchmark-params", json.dumps({"path": str(SAMPLE), "evaluation_mode": "same"}))
    assert same.returncode == 2 and "evaluation_mode 'fresh'" in same.stderr and len(same.stderr.splitlines()) == 1
    bad_mode = cli("run", "swebench_lite", "oracle", "none", "--config", str(tmp_path / "local.yaml"),
                   "--results-dir", str(tmp_path / "res"),
                   "--benchmark-params", json.dumps({"path": str(SAMPLE), "evaluation_mode": "reuse"}))
    assert bad_mode.returncode == 2 and "evaluation_mode' must be one of fresh, same" in bad_mode.stderr, bad_mode.stderr
    assert not (tmp_path / "res").exists()
    no_flag = cli("eval", "swebench_lite")
    assert no_flag.returncode == 2 and "--predictions" in no_flag.stderr


def test_hub_loader_reads_a_dataset_directory_and_parquet(tmp_path, hub_style_jsonl):
    """The `datasets` code path of source.hf, on a hub-layout directory (data/<split>-*.parquet) offline."""
    from datasets import Dataset

    rows = [json.loads(line) for line in hub_style_jsonl.read_text().splitlines()]
    (tmp_path / "hub" / "data").mkdir(parents=True)
    Dataset.from_list(rows).to_parquet(str(tmp_path / "hub" / "data" / "test-00000-of-00001.parquet"))
    tasks = SwebenchFormat(recipe(source={"hf": str(tmp_path / "hub"), "split": "test"})).load()
    assert [t.id for t in tasks] == SAMPLE_IDS
    assert tasks[0].data["FAIL_TO_PASS"] == json.loads(SAMPLE.read_text())[0]["FAIL_TO_PASS"]
    with pytest.raises(UserError, match="split 'dev'"):
        SwebenchFormat(recipe(source={"hf": str(tmp_path / "hub"), "split": "test"}, params={"split": "dev"})).load()
    assert [t.id for t in load(tmp_path / "hub" / "data" / "test-00000-of-00001.parquet")] == SAMPLE_IDS


def test_classic_reset_lines_are_swebench_4s():
    """swebench 4.1.0's reset: only files that exist before the test patch (not created ones, text or binary),
    nothing removed, and `git checkout <base> ` with no paths when the test patch only adds files."""
    row = json.loads(SAMPLE.read_text())[2]  # pytest-dev__pytest-11143
    base = row["base_commit"]
    added = ("diff --git a/testing/test_new.py b/testing/test_new.py\nnew file mode 100644\nindex 0000000..587be6b\n"
             "--- /dev/null\n+++ b/testing/test_new.py\n@@ -0,0 +1 @@\n+x\n")
    binary = ("diff --git a/testing/expected.png b/testing/expected.png\nnew file mode 100644\nindex 0000000..f584f40\n"
              "Binary files /dev/null and b/testing/expected.png differ\n")
    adds_only = classic_eval_script({**row, "test_patch": added + binary}, "START", "END")
    assert adds_only.count(f"\ngit checkout {base} \n") == 2 and "rm -f" not in adds_only
    with_binary = classic_eval_script({**row, "test_patch": row["test_patch"] + binary + added}, "START", "END")
    assert with_binary.count(f"\ngit checkout {base} testing/test_assertrewrite.py\n") == 2
    assert "rm -f" not in with_binary


def test_predictions_have_a_line_per_attempted_instance(tmp_path):
    """As mini-swe-agent's preds.json: an attempt that ended in an error submits the empty patch."""
    from agentcompass.core.results import TrialResult

    stamp = "2026-11-30T00:00:00+00:00"
    graded = TrialResult(task_id="a__a-1", attempt=1, status="passed", started_at=stamp, finished_at=stamp,
                         details={"patch": "diff --git a/x b/x\n", "model_name_or_path": "openai/gpt-x"})
    errored = TrialResult(task_id="b__b-2", attempt=1, status="error", error_category="infra",
                          message="sandbox lost", started_at=stamp, finished_at=stamp)
    SwebenchFormat(recipe(params={"path": str(SAMPLE)})).write_artifacts(tmp_path, [errored, graded])
    lines = [json.loads(line) for line in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    assert lines == [
        {"instance_id": "a__a-1", "model_name_or_path": "openai/gpt-x", "model_patch": "diff --git a/x b/x\n"},
        {"instance_id": "b__b-2", "model_name_or_path": "openai/gpt-x", "model_patch": ""},
    ]


LINE = "a line of text, eighty characters long with its newline " + "." * 23


def test_a_patch_over_the_exec_output_cap_is_extracted_whole(tmp_path):
    """An 11 MiB new file: the official harness and mini have no cap, so neither does the patch."""
    from agentcompass.core.sandbox import DEFAULT_OUTPUT_CAP, TRUNCATION_MARK

    fmt = seeded_format(tmp_path)
    task = fmt.load()[0]
    sandbox = LocalProvider(isolation="auto").open(SandboxSpec(name="t", workdir="/testbed", runs_on_host=True))
    try:
        fmt.stage(task, sandbox, Trial(tmp_path))
        assert sandbox.exec(f"yes '{LINE}' | head -n 140000 > big.txt && echo the-end >> big.txt").ok
        patch = fmt.extract_patch(task, sandbox)
    finally:
        sandbox.close()
    assert len(patch.encode()) > DEFAULT_OUTPUT_CAP + 512 * 1024
    assert TRUNCATION_MARK not in patch and patch.endswith(f"+{LINE}\n+the-end\n")
    assert patch.count(f"+{LINE}\n") == 140000


def test_history_beyond_head_is_gone_before_the_agent_starts_and_the_start_still_diffs(tmp_path):
    """The checkout carries the upstream fix as a later commit (tagged, on a branch, a remote's ref, in the reflog
    and ORIG_HEAD after a reset, packed) and one unreferenced commit: after staging, no git command finds either,
    while the base, its tag and the patch extraction are as before (SWE-bench's newer images are built so)."""
    fmt = seeded_format(tmp_path)
    repo = tmp_path / "repos" / "x__x-1"
    base = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "tag", "v1.0")
    (repo / "a.py").write_text("A = 'FUTURE-FIX'\n")
    git(repo, "commit", "-qam", "FUTURE-FIX upstream")
    future = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "tag", "v2.0")
    git(repo, "branch", "upstream-main")
    git(repo, "remote", "add", "origin", "/nonexistent/upstream.git")
    git(repo, "update-ref", "refs/remotes/origin/main", future)
    git(repo, "gc", "-q")
    git(repo, "reset", "-q", "--hard", base)
    loose = git(repo, "commit-tree", f"{future}^{{tree}}", "-p", base, "-m", "LOOSE-FUTURE").strip()
    task = fmt.load()[0]
    sandbox = LocalProvider(isolation="auto").open(SandboxSpec(name="t", workdir="/testbed", runs_on_host=True))
    try:
        assert git(repo, "cat-file", "-t", future) == git(repo, "cat-file", "-t", loose) == "commit\n"  # there before
        fmt.stage(task, sandbox, Trial(tmp_path))
        seen = {command: sandbox.exec(command) for command in (
            "git log --all --oneline", "git log -g --all --oneline", "git reflog", "git tag", "git remote",
            "git branch -a", "git stash list", f"git cat-file -e {future}", f"git cat-file -e {loose}",
            "git fsck --unreachable --no-reflogs --no-progress", "git rev-parse HEAD")}
        assert sandbox.exec("echo 'A = 2' > a.py").ok
        patch = fmt.extract_patch(task, sandbox)
    finally:
        sandbox.close()
    everything = "".join(r.stdout + r.stderr for c, r in seen.items() if "cat-file" not in c)
    assert "FUTURE" not in everything and future[:7] not in everything and loose[:7] not in everything
    assert not seen[f"git cat-file -e {future}"].ok and not seen[f"git cat-file -e {loose}"].ok
    assert seen["git tag"].stdout.split() == ["v1.0"] and seen["git remote"].stdout.strip() == ""
    assert seen["git rev-parse HEAD"].stdout.strip() == base
    assert "-A = 1" in patch and "+A = 2" in patch


def test_a_base_commit_head_does_not_descend_from_is_kept_for_the_grader(tmp_path):
    """The grader checks test files out of the row's base_commit: where the image's HEAD does not descend from
    it, the scrub keeps it (by a ref of ours) while removing the rest of the side branch's future."""
    fmt = seeded_format(tmp_path)
    repo = tmp_path / "repos" / "x__x-1"
    root = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "checkout", "-q", "-b", "side")
    (repo / "t.py").write_text("T = 1\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "side base")
    side_base = git(repo, "rev-parse", "HEAD").strip()
    (repo / "t.py").write_text("T = 'FUTURE'\n")
    git(repo, "commit", "-qam", "FUTURE on side")
    future = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "checkout", "-q", "master" if "master" in git(repo, "branch") else "main")
    rows = json.loads((tmp_path / "rows.json").read_text())
    rows[0]["base_commit"] = side_base
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    task = fmt.load()[0]
    sandbox = LocalProvider(isolation="auto").open(SandboxSpec(name="t", workdir="/testbed", runs_on_host=True))
    try:
        fmt.stage(task, sandbox, Trial(tmp_path))
        kept = sandbox.exec(f"git cat-file -t {side_base} && git rev-parse HEAD")
        gone = sandbox.exec(f"git cat-file -e {future}")
    finally:
        sandbox.close()
    assert kept.ok and kept.stdout.split() == ["commit", root], kept
    assert not gone.ok
