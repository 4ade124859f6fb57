"""`agentcompass regrade` on finished docker runs of Terminal-Bench, SWE-bench and CooperBench (same and changed
verifier), and the two sources of a container's changes (overlay2's upper dir, the engine's diff and archive API)."""

from __future__ import annotations

import json
import tarfile
import uuid
from pathlib import Path

import pytest

from docker_sandbox import open_sandbox, plain_context, provider  # noqa: F401 (fixtures)
from swebench_calc import IDS, calc_rows, predictions_of, trials as rows_of
from swebench_calc import calc_image, calc_repo  # noqa: F401 (fixtures)
from terminal_bench_tasks import verdict_script, write_task


# -- Terminal-Bench on docker ---------------------------------------------------------------
@pytest.mark.docker
def test_a_terminal_bench_run_regraded_with_the_same_and_a_changed_verifier(cli, base_image, tmp_path):
    image = f"FROM {base_image}\nWORKDIR /app\n"

    def tasks(root: Path, want: str) -> None:
        for name, answer in (("tb-keep", "1"), ("tb-flip", "7")):
            expected = "1" if name == "tb-keep" else want
            write_task(root, name, dockerfile=image, task_yaml="instruction: x\nparser_name: swebench\n",
                       files={"solution.sh": f"echo {answer} > /app/out.txt\n",
                              "run-tests.sh": verdict_script(f'[ "$(cat /app/out.txt)" = {expected} ]')})

    tasks(tmp_path / "data", "7")
    tasks(tmp_path / "changed-all", "8")
    (tmp_path / "changed").mkdir()
    (tmp_path / "changed-all" / "tb-flip").rename(tmp_path / "changed" / "tb-flip")
    name = f"tb-{uuid.uuid4().hex[:6]}"
    done = cli("run", "terminal_bench", "oracle", "none", "--env", "docker", "--benchmark-params",
               json.dumps({"path": str(tmp_path / "data")}), "--results-dir", str(tmp_path / "res"), "--run-name", name)
    assert done.returncode == 0, done.stderr
    run_dir = tmp_path / "res" / name / "terminal_bench__oracle__none__docker"
    assert {k: r["status"] for k, r in rows_of(run_dir).items()} == {"tb-keep": "passed", "tb-flip": "passed"}
    same = cli("regrade", str(run_dir))
    assert same.returncode == 0, same.stderr
    assert {k: r["status"] for k, r in rows_of(tmp_path / "res" / f"{name}-regrade" / run_dir.name).items()} == \
        {"tb-keep": "passed", "tb-flip": "passed"}
    changed = cli("regrade", str(run_dir), "--run-name", "tb-changed", "--verifier-from", str(tmp_path / "changed"))
    assert changed.returncode == 0, changed.stderr
    assert {k: r["status"] for k, r in rows_of(tmp_path / "res" / "tb-changed" / run_dir.name).items()} == \
        {"tb-keep": "passed", "tb-flip": "failed"}


# -- SWE-bench (a graded patch) on docker ---------------------------------------------------

@pytest.mark.docker
def test_a_swebench_run_regraded_grades_the_kept_patch_again(cli, calc_repo, calc_image, tmp_path):
    rows = calc_rows(tmp_path / "rows.jsonl", calc_repo, calc_image, "python3")
    kinds = ["gold", "empty", "breaks_p2p"]
    (tmp_path / "preds.json").write_text(json.dumps(predictions_of(calc_repo, kinds)))
    done = cli("eval", "swebench_lite", "--predictions", str(tmp_path / "preds.json"), "--env", "docker",
               "--run-name", "sb", "--results-dir", str(tmp_path / "res"),
               "--benchmark-params", json.dumps({"path": str(rows), "sample_ids": [IDS[k] for k in kinds]}))
    assert done.returncode == 0, done.stderr
    run_dir = tmp_path / "res" / "sb" / "swebench_lite__predictions__my-model__docker"
    original = rows_of(run_dir)
    assert {IDS[k]: original[IDS[k]]["status"] for k in kinds} == {IDS["gold"]: "passed", IDS["empty"]: "failed",
                                                                   IDS["breaks_p2p"]: "failed"}
    again = cli("regrade", str(run_dir))
    assert again.returncode == 0, again.stderr
    regraded = rows_of(tmp_path / "res" / "sb-regrade" / run_dir.name)
    assert {k: r["status"] for k, r in regraded.items()} == {k: r["status"] for k, r in original.items()}
    for kind in kinds:  # the very patch graded again, test by test
        assert regraded[IDS[kind]]["details"].get("patch") == original[IDS[kind]]["details"].get("patch")
        assert regraded[IDS[kind]]["details"].get("PASS_TO_PASS") == original[IDS[kind]]["details"].get("PASS_TO_PASS")
    refused = cli("regrade", str(run_dir), "--run-name", "sb-2", "--verifier-from", str(tmp_path))
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "dataset" in refused.stderr


# -- CooperBench (a merged patch) on docker --------------------------------------------------
@pytest.mark.docker
def test_a_cooperbench_coop_run_regraded_grades_the_kept_merged_patch_again(cli, base_image, tmp_path):
    from cooperbench_factory import make_config_dir, make_dataset

    config = make_config_dir(tmp_path, make_dataset(tmp_path), base_image)
    pair = "tiny_calc_task/task7/f1+f3"  # the pair whose patches conflict and merge with the union driver
    done = cli("run", "cooperbench_tiny", "oracle", "none", "--env", "docker", "--config-dir", str(config),
               "--benchmark-params", json.dumps({"setting": "coop", "sample_ids": [pair]}),
               "--results-dir", str(tmp_path / "res"), "--run-name", "cb", timeout=600)
    assert done.returncode == 0, done.stderr
    [run_dir] = [p.parent for p in (tmp_path / "res" / "cb").glob("*/summary.json")]
    again = cli("regrade", str(run_dir), timeout=600)
    assert again.returncode == 0, again.stderr
    original, regraded = rows_of(run_dir)[pair], rows_of(tmp_path / "res" / "cb-regrade" / run_dir.name)[pair]
    assert original["status"] == regraded["status"] == "passed", regraded
    assert regraded["details"]["merged_diff"] == original["details"]["merged_diff"]
    assert [r["passed"] for r in regraded["details"]["feature_results"]] == [True, True]


# -- docker: the two sources of a container's changes ---------------------------------------

@pytest.mark.docker
def test_both_sources_of_a_containers_changes_archive_the_same_state_and_restore_it(open_sandbox, tmp_path, monkeypatch):
    """overlay2's upper dir (read on the host) and the engine's diff + archive API (a remote engine) keep the same
    files, links and deletions, and either archive restores them into a fresh container."""
    import agentcompass.providers.docker.sandbox as docker_sandbox

    box = open_sandbox()
    work = box.exec("echo hi > /app/a && mkdir -p /opt/x && echo y > /opt/x/f && rm /etc/issue && ln -s /etc /app/l",
                    user="root")
    assert work.exit_code == 0, work.stderr
    upper, listed = tmp_path / "upper.tar", tmp_path / "listed.tar"
    box.export_changes(upper, 10 * 1024 * 1024)
    monkeypatch.setattr(docker_sandbox, "storage_dirs", lambda inspected: None)  # as where /var/lib/docker is not ours
    box.export_changes(listed, 10 * 1024 * 1024)

    def members(path: Path) -> set[tuple[str, str, str]]:
        with tarfile.open(path) as archive:
            return {(m.name, "dir" if m.isdir() else "link" if m.issym() else "file", m.linkname) for m in archive
                    if not m.isdir()}

    assert members(upper) == members(listed)
    assert {("app/a", "file", ""), ("opt/x/f", "file", ""), ("etc/.wh.issue", "file", ""),
            ("app/l", "link", "/etc")} <= members(listed)
    fresh = open_sandbox()
    fresh.restore_changes(listed)
    state = fresh.exec("cat /app/a /opt/x/f; readlink /app/l; test -e /etc/issue && echo still-there", user="root")
    assert state.stdout.split() == ["hi", "y", "/etc"], state.stdout
    # A folder replaced whole (overlay marks it opaque): restored with none of the image's entries, from either source.
    replaced = open_sandbox()
    assert replaced.exec("rm -rf /etc/apt && mkdir /etc/apt && echo n > /etc/apt/new", user="root").exit_code == 0
    replaced.export_changes(tmp_path / "replaced-listed.tar", 10 * 1024 * 1024)
    monkeypatch.undo()
    replaced.export_changes(tmp_path / "replaced-upper.tar", 10 * 1024 * 1024)
    assert ("etc/apt/.wh..wh..opq", "file", "") in members(tmp_path / "replaced-upper.tar")
    for source in ("replaced-listed.tar", "replaced-upper.tar"):
        again = open_sandbox()
        again.restore_changes(tmp_path / source)
        assert again.exec("ls -A /etc/apt", user="root").stdout.split() == ["new"], source

    from agentcompass.providers.docker.kept import OverCap

    with pytest.raises(OverCap) as over:
        box.export_changes(tmp_path / "capped.tar", 4)
    assert over.value.size == 5 and not (tmp_path / "capped.tar").exists()  # "hi\n" and "y\n": nothing written
