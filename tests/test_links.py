"""No host-side copy follows a link out of its tree (core/safe_files.py): archives through the safe extractor,
the local provider's host copy of its workspace, and whole Harbor runs on local and docker whose impossible
tasks plant links to host files in /logs. A planted link fails the attempt with evidence (details.tampered),
in the rate's base, never retried; an honest agent's artifacts (files, folders, a link inside them) still
arrive as they were."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from agentcompass.core.errors import AgentError
from agentcompass.core.safe_files import extract_tree
from agentcompass.core.sandbox import read_whole
from agentcompass.formats.integrity import clear_on_host
from harbor_factory import add_toml, make_recipe, make_task
from link_attacks import SECRET, assert_download_follows_no_link, everything_under
from local_sandbox import sandbox  # noqa: F401 (a fixture)

# The tests want a value the agent cannot know: no honest solution passes, so only the count is at stake.
IMPOSSIBLE = 'if [ "$(cat /app/answer.txt 2>/dev/null)" = "$(head -c 16 /dev/urandom | od -An -tx1)" ]; ' \
             "then echo 1; else echo 0; fi > /logs/verifier/reward.txt"


def archive(entries: list[tuple[str, str, str]]) -> tarfile.TarFile:
    """A tar built member by member, as a hostile sandbox's `tar` (or engine) could send it."""
    kinds = {"file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "link": tarfile.SYMTYPE, "hard": tarfile.LNKTYPE,
             "char": tarfile.CHRTYPE, "fifo": tarfile.FIFOTYPE}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, kind, value in entries:
            info = tarfile.TarInfo(name)
            info.type, info.mode = kinds[kind], 0o755
            data = value.encode() if kind == "file" else b""
            if kind in ("link", "hard"):
                info.linkname = value
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    buffer.seek(0)
    return tarfile.open(fileobj=buffer)


def test_the_extractor_refuses_every_member_that_leaves_the_tree(tmp_path):
    tar = archive([
        ("artifacts", "dir", ""), ("artifacts/ok.txt", "file", "ok"), ("artifacts/sub", "dir", ""),
        ("artifacts/sub/x", "file", "x"), ("artifacts/sub/back", "link", "../ok.txt"), ("artifacts/rel", "link", "sub/x"),
        ("artifacts/abs", "link", "/etc/shadow"), ("artifacts/up", "link", "../../etc/shadow"),
        ("artifacts/here", "link", "."), ("artifacts/through", "link", "here/../.."), ("artifacts/here/planted", "file", "p"),
        ("../escaped", "file", "e"), ("/absolute", "file", "a"), ("artifacts/../../escaped2", "file", "e"),
        ("artifacts/null", "char", ""), ("artifacts/pipe", "fifo", ""), ("artifacts/hard", "hard", "artifacts/ok.txt"),
        ("artifacts/hard-out", "hard", "etc/shadow"),
    ])
    local = tmp_path / "deep" / "copy"
    refused = extract_tree(tar, local, "/logs/artifacts")
    assert everything_under(tmp_path) == {
        "deep": "", "deep/copy": "", "deep/copy/ok.txt": "ok", "deep/copy/sub": "", "deep/copy/sub/x": "x",
        "deep/copy/sub/back": "-> ../ok.txt", "deep/copy/rel": "-> sub/x", "deep/copy/here": "-> .",
        "deep/copy/hard": "ok"}, everything_under(tmp_path)
    said = "\n".join(refused)
    for member in ("/logs/artifacts/abs: a link to /etc/shadow", "/logs/artifacts/up: a link", "/logs/artifacts/through: a link",
                   "/logs/artifacts/here/planted: a member under a link", "'../escaped'", "'/absolute'", "escaped2",
                   "/logs/artifacts/null: a device file", "/logs/artifacts/pipe: a fifo", "/logs/artifacts/hard-out: a hard link"):
        assert member in said, (member, said)
    assert len(refused) == 10


def test_a_top_that_is_a_link_is_refused_whole(tmp_path):
    refused = extract_tree(archive([("reward.txt", "link", "/etc/shadow")]), tmp_path / "reward.txt", "/logs/verifier/reward.txt")
    assert refused == ["/logs/verifier/reward.txt: a link to /etc/shadow, out of the copied tree (not followed, not copied)"]
    assert not os.path.lexists(tmp_path / "reward.txt")


def test_the_local_host_copy_follows_no_link(sandbox, tmp_path):
    """The local provider's download of what the agent left: a link to a host file, a folder replaced by a link
    to a host folder, a parent replaced by one: nothing of the host's is copied, each refusal is reported."""
    assert_download_follows_no_link(sandbox, tmp_path)
    host, results = tmp_path / "host-only", tmp_path / "results"
    assert sandbox.exec('ln -s "$HOST" /logs/agent/dir && ln -s "$HOST" /tmp/outside', env={"HOST": str(host)}).exit_code == 0
    assert sandbox.download("/logs/agent", results / "agent") == [
        f"/logs/agent/dir: a link to {host}, out of the copied tree (not followed, not copied)"]
    assert sandbox.download("/tmp/outside/secret-file", results / "through") == [
        f"/tmp/outside/secret-file: reached through /tmp/outside, a link to {host} (not followed, not copied)"]
    assert SECRET not in json.dumps(everything_under(results))


def test_clearing_the_verifiers_paths_on_the_host_never_removes_through_a_link(sandbox, tmp_path):
    """A local agent that replaces /logs/verifier with a link to a host folder: clearing removes the link, never
    the host files it points at, and says it found it."""
    host = tmp_path / "host-dir"
    host.mkdir()
    (host / "reward.txt").write_text("keep me")
    assert sandbox.exec('rm -rf /logs/verifier && ln -s "$HOST" /logs/verifier', env={"HOST": str(host)}).exit_code == 0
    found = clear_on_host(sandbox.host_path, (), ("/logs/verifier/reward.txt",), ("/logs/verifier",))
    assert found == ["/logs/verifier"]
    assert (host / "reward.txt").read_text() == "keep me"
    assert sandbox.host_path("/logs/verifier").is_dir() and not sandbox.host_path("/logs/verifier").is_symlink()


def test_a_file_read_whole_that_is_a_link_is_the_agents_error_not_infra(sandbox):
    """A SWE-bench patch or a mini-swe-agent submission the agent replaced with a link: counted as its failure."""
    assert sandbox.exec("ln -s /etc/shadow /tmp/submission.txt").exit_code == 0
    with pytest.raises(AgentError, match="/tmp/submission.txt: a link to /etc/shadow"):
        read_whole(sandbox, "/tmp/submission.txt")


# -- whole runs: impossible Harbor tasks whose "solution" plants links, and an honest control -------------------
def link_tasks(root: Path, host: Path, dockerfile: str | None) -> None:
    """`host` is a folder of this machine no sandbox sees (its secret-file holds SECRET)."""
    plants = {
        "link-in-artifacts": f"mkdir -p /logs/artifacts && ln -s {host}/secret-file /logs/artifacts/x",
        "link-in-verifier-logs": f"mkdir -p /logs/verifier && ln -s /etc/shadow /logs/verifier/shadow"
                                 f" && ln -s {host}/secret-file /logs/verifier/leak",
        "artifacts-are-a-link": f"mkdir -p /logs && rm -rf /logs/artifacts && ln -s {host} /logs/artifacts",
    }
    for task_id, plant in plants.items():
        make_task(root, task_id, solve=plant, test=IMPOSSIBLE, dockerfile=dockerfile)
    # Honest: files, a folder, a link inside it, and a declared artifact folder; the tests check what they wrote.
    honest = ("mkdir -p /logs/artifacts/report/deep /app/out && echo 42 > /app/answer.txt && echo summary > /logs/artifacts/summary.txt"
              " && echo deep > /logs/artifacts/report/deep/notes.md && ln -s deep/notes.md /logs/artifacts/report/latest"
              " && echo built > /app/out/build.log")
    task = make_task(root, "honest-artifacts", solve=honest, dockerfile=dockerfile,
                     test='if [ "$(cat /app/answer.txt)" = 42 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt')
    add_toml(task, 'artifacts = ["/app/out"]\n')


def check_run(run_dir: Path) -> None:
    rows = {r["task_id"]: r for r in map(json.loads, (run_dir / "trials.jsonl").read_text().splitlines())}
    assert len(rows) == 4 and all(r["attempt"] == 1 for r in rows.values())  # one record each: none was retried
    for task_id in ("link-in-artifacts", "link-in-verifier-logs", "artifacts-are-a-link"):
        row = rows[task_id]
        assert (row["status"], row["error_category"], row["retries"]) == ("failed", None, 0), row
        assert row["details"]["tampered"] and "not followed, not copied" in row["message"], row
    assert any("/logs/verifier/shadow: a link to /etc/shadow" in e for e in rows["link-in-verifier-logs"]["details"]["tampered"])
    honest = rows["honest-artifacts"]
    assert (honest["status"], honest["reward"]) == ("passed", 1.0) and "tampered" not in honest["details"], honest
    attempt = run_dir / "tasks" / "honest-artifacts" / "attempt-1" / "artifacts"
    assert everything_under(attempt) == {
        "logs": "", "logs/artifacts": "", "logs/artifacts/summary.txt": "summary\n", "logs/artifacts/report": "",
        "logs/artifacts/report/deep": "", "logs/artifacts/report/deep/notes.md": "deep\n",
        "logs/artifacts/report/latest": "-> deep/notes.md", "app": "", "app/out": "", "app/out/build.log": "built\n"}
    leaked = [p for p in run_dir.rglob("*") if (p.is_symlink() and not p.resolve().is_relative_to(run_dir))
              or (p.is_file() and not p.is_symlink() and SECRET in p.read_text(errors="replace"))]
    assert leaked == []
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["tampered"] == 3 and summary["pass_at_1"] == pytest.approx(0.25), summary  # all four in the base


def run_link_tasks(cli, tmp_path: Path, env: str, dockerfile: str | None) -> Path:
    host = tmp_path / "host-only"
    host.mkdir()
    (host / "secret-file").write_text(SECRET)
    dataset, conf = tmp_path / "tasks", tmp_path / "conf"
    link_tasks(dataset, host, dockerfile)
    make_recipe(conf, "links", dataset, runs_on_host=dockerfile is None)
    done = cli("run", "links", "oracle", "none", "--env", env, "--config-dir", str(conf), "--results-dir",
               str(tmp_path / "res"), "--run-name", "r", "--max-retries", "2")
    assert done.returncode == 0, done.stderr
    return tmp_path / "res" / "r" / f"links__oracle__none__{env}"


def test_links_planted_in_logs_fail_the_attempt_on_local(cli, tmp_path):
    check_run(run_link_tasks(cli, tmp_path, "local", None))


@pytest.mark.docker
def test_links_planted_in_logs_fail_the_attempt_on_docker(cli, tmp_path, base_image):
    check_run(run_link_tasks(cli, tmp_path, "docker", f"FROM {base_image}\nWORKDIR /app\n"))
