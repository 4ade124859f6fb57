"""Verdict integrity in Harbor's shared verifier mode: impossible tasks (the tests want a secret the agent never
sees) whose "solutions" attack the verifier must fail; honest controls must pass exactly as under Harbor (a
server left running for the tests, a package installed the way pip lays it out, a non-root agent), and the
agent sees /logs as Harbor lays it out (/logs/agent, /logs/verifier, /logs/artifacts) in both modes."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from agentcompass.formats.tamper import pth_verdicts, sort_changes
from harbor_factory import (CONTROL_SECRET, DEBIAN_SITE, HONEST_CONTROLS, add_toml, honest_controls, honest_wheel,
                             make_recipe, make_task)

SECRET = CONTROL_SECRET
# The verdict is Python's: a hook that forces its exit status or a replaced interpreter turns it into a pass.
PY_CHECK = (f"python3 -c \"import sys; sys.exit(0 if open('/tmp/answer').read().strip() == '{SECRET}' else 1)\" "
            "2>/dev/null; code=$?; if [ $code = 0 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt")
NEUTER_EXIT = "import atexit, os; atexit.register(os._exit, 0)"  # whatever the check raised, exit 0
FAKE_PYTHON = "#!/bin/sh\\nexit 0\\n"
SITE = DEBIAN_SITE
USER_SITE = "/root/.local/lib/python3.11/site-packages"
NOBODY_DAEMON = ("nohup sh -c 'while :; do echo 1 > /logs/verifier/reward.txt; echo 1 > /tmp/r.$$ && "
                 "mv -f /tmp/r.$$ /logs/verifier/reward.txt; sleep 0.01; done' >/dev/null 2>&1 &")

INOTIFY_REWRITER = """\
import ctypes, os, time
libc = ctypes.CDLL(None)
while not os.path.exists("/tests/test.sh"):
    time.sleep(0.01)
fd = libc.inotify_init()
libc.inotify_add_watch(fd, b"/logs/verifier", 0x8)  # IN_CLOSE_WRITE
while b"reward.txt" not in os.read(fd, 4096):
    pass
with open("/logs/verifier/.r", "w") as new:
    new.write("1\\n")
os.rename("/logs/verifier/.r", "/logs/verifier/reward.txt")
"""

ATTACKS = {
    "replaced-python3": f"printf '{FAKE_PYTHON}' > /usr/bin/python3.11",
    # (bash runs this very script: a new file renamed over it, as a write would find it busy)
    "replaced-bash": "cp /bin/dash /tmp/dash && printf '#!/tmp/dash\\necho 1 > /logs/verifier/reward.txt\\n' > /tmp/b "
                     "&& chmod +x /tmp/b && mv -f /tmp/b /usr/bin/bash",
    # (Debian's own sitecustomize, in the standard library, would come first on sys.path: it goes)
    "sitecustomize": f"rm -f /usr/lib/python3.11/sitecustomize.py && echo '{NEUTER_EXIT}' > {SITE}/sitecustomize.py",
    "usercustomize": f"mkdir -p {USER_SITE} && echo '{NEUTER_EXIT}' > {USER_SITE}/usercustomize.py",
    "pth-import-hook": f"echo '{NEUTER_EXIT}' > {SITE}/zz-speedups.pth",
    "nobody-daemon": NOBODY_DAEMON,  # the agent runs as nobody, the verifier as root
    "root-daemon": "nohup sh -c 'while :; do echo 1 > /logs/verifier/reward.txt; done' >/dev/null 2>&1 &",
    # waits for the tests, then for test.sh's reward, and replaces it atomically (nothing half-written to see)
    "root-daemon-atomic": "nohup sh -c 'while [ ! -f /tests/test.sh ]; do sleep 0.05; done; "
                          "while [ ! -f /logs/verifier/reward.txt ]; do sleep 0.05; done; sleep 0.3; "
                          "echo 1 > /tmp/r && mv /tmp/r /logs/verifier/reward.txt' >/dev/null 2>&1 &",
    # waits (inotify) for test.sh's reward and replaces it at once, in the moment before it is read back
    "root-daemon-inotify": "cat > /tmp/w.py <<'EOF'\n" + INOTIFY_REWRITER + "EOF\nnohup python3 /tmp/w.py >/dev/null 2>&1 &",
}


def integrity_dataset(root: Path, base_image: str) -> None:
    dockerfile = f"FROM {base_image}\nWORKDIR /app\n"
    for task_id, solve in ATTACKS.items():
        task = make_task(root, task_id, solve=solve, test=PY_CHECK, dockerfile=dockerfile)
        if task_id == "nobody-daemon":
            add_toml(task, '[agent]\nuser = "nobody"\n')
    honest_controls(root, base_image)

def oracle_rows(cli, recipe: str, env: str, conf: Path, tmp_path: Path) -> dict[str, dict]:
    """The oracle's trials of `recipe` on `env`, by task id."""
    done = cli("run", recipe, "oracle", "none", "--env", env, "--config-dir", str(conf),
               "--results-dir", str(tmp_path / "res"), "--run-name", "r", "--max-retries", "0", timeout=900)
    assert done.returncode == 0, done.stderr
    trials = tmp_path / "res" / "r" / f"{recipe}__oracle__none__{env}" / "trials.jsonl"
    return {r["task_id"]: r for r in map(json.loads, trials.read_text().splitlines())}


@pytest.mark.docker
def test_attacks_fail_and_honest_work_passes_in_the_shared_verifier_mode(cli, base_image, tmp_path):
    dataset, conf = tmp_path / "tasks", tmp_path / "conf"
    integrity_dataset(dataset, base_image)
    make_recipe(conf, "integrity", dataset, runs_on_host=False)
    rows = oracle_rows(cli, "integrity", "docker", conf, tmp_path)
    seen = {t: (r["status"], r["reward"], r["message"][:300], r["details"].get("tampered")) for t, r in rows.items()}
    for task_id in ATTACKS:
        assert rows[task_id]["status"] == "failed", (task_id, seen)
    for task_id in ("replaced-python3", "replaced-bash", "sitecustomize", "usercustomize", "pth-import-hook",
                    "root-daemon", "root-daemon-inotify"):
        assert rows[task_id]["details"].get("tampered"), (task_id, seen)
    for task_id in HONEST_CONTROLS:
        assert rows[task_id]["status"] == "passed" and rows[task_id]["reward"] == 1.0, (task_id, seen)
        assert not rows[task_id]["details"].get("tampered"), rows[task_id]["details"]
    installed = rows["pip-installed-package"]["details"]["changed_outside_workdir"]["paths"]
    assert f"{SITE}/answerpkg-precedence.pth" in installed  # recorded as evidence, not held against the agent
    assert rows["multistep-all-shared"]["details"]["steps_run"] == 2


def local_user_site() -> str:
    """The user site of the host's python3 under the local sandbox's HOME (its private /tmp)."""
    version = subprocess.run(["python3", "-c", "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"],
                             capture_output=True, text=True, check=True).stdout.strip()
    return f"$HOME/.local/lib/python{version}/site-packages"


def test_user_site_hooks_fail_on_local_and_an_installed_package_there_passes(cli, tmp_path):
    """Locally agent and verifier share HOME: a hook in the user site would run in the verifier's Python."""
    dataset, conf = tmp_path / "tasks", tmp_path / "conf"
    site = local_user_site()
    make_task(dataset, "usercustomize", solve=f"mkdir -p {site} && echo '{NEUTER_EXIT}' > {site}/usercustomize.py",
              test=PY_CHECK)
    make_task(dataset, "user-pth-import-hook", solve=f"mkdir -p {site} && echo '{NEUTER_EXIT}' > {site}/zz.pth",
              test=PY_CHECK)
    task = make_task(dataset, "user-installed-package",
                     solve=f"mkdir -p {site} && python3 -m zipfile -e /solution/answerpkg-1.0-py3-none-any.whl {site}/",
                     test="python3 -c \"import os, sys, answerpkg; "
                          f"sys.exit(0 if answerpkg.ANSWER == '{SECRET}' and os.environ.get('ANSWERPKG') == '1' else 1)\" "
                          "&& echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt")
    honest_wheel(task / "solution" / "answerpkg-1.0-py3-none-any.whl")
    make_recipe(conf, "local-integrity", dataset, runs_on_host=True)
    rows = oracle_rows(cli, "local-integrity", "local", conf, tmp_path)
    seen = {t: (r["status"], r["reward"], r["message"][:300]) for t, r in rows.items()}
    assert rows["usercustomize"]["status"] == "failed" and rows["usercustomize"]["details"].get("tampered"), seen
    assert rows["user-pth-import-hook"]["status"] == "failed" and rows["user-pth-import-hook"]["details"].get("tampered"), seen
    assert rows["user-installed-package"]["status"] == "passed", seen


def test_a_run_can_grade_every_task_that_allows_it_in_a_separate_verifier(tmp_path):
    """verifier_mode: separate grades a shared task as Harbor's separate mode would; a multi-step task (whose
    separate steps are not supported) stays shared."""
    from agentcompass.core.schema import Recipe
    from agentcompass.formats.harbor.format import HarborFormat

    make_task(tmp_path, "single", solve="true", test="true")
    add_toml(make_task(tmp_path, "stepped", solve="true", test="true"), '[[steps]]\nname = "one"\n')
    (tmp_path / "stepped" / "steps" / "one").mkdir(parents=True)
    (tmp_path / "stepped" / "steps" / "one" / "instruction.md").write_text("Do it.\n")

    def modes(params: dict) -> dict[str, str]:
        recipe = Recipe(name="h", description="d", format="harbor", source={"path": str(tmp_path)},
                        runs_on_host=True, params=params)
        return {t.id: t.data["environment_mode"] for t in HarborFormat(recipe).load()}

    assert modes({}) == {"single": "shared", "stepped": "shared"}
    assert modes({"verifier_mode": "separate"}) == {"single": "separate", "stepped": "shared"}


def test_only_unrecorded_import_pth_files_count_against_the_agent():
    verdict, evidence = pth_verdicts({"/s/site-packages/a.pth": "import evil\n", "/s/site-packages/b.pth": "import ok\n",
                                      "/s/site-packages/c.pth": "/some/path\n"}, recorded={"/s/site-packages/b.pth"})
    assert [v.split(":")[0] for v in verdict] == ["/s/site-packages/a.pth"]
    assert sorted(evidence) == ["/s/site-packages/b.pth", "/s/site-packages/c.pth"]


def test_changes_honest_installs_make_are_evidence_only():
    changes = [("C", "/usr"), ("C", "/usr/local/bin"), ("A", "/usr/local/bin/pytest"), ("A", "/usr/bin/jq"),
               ("C", "/etc/ld.so.cache"), ("A", "/app/sitecustomize.py"), ("C", "/app/main.py"),
               ("A", "/usr/local/lib/python3.11/dist-packages/requests/__init__.py")]
    sorted_ = sort_changes(changes, "/app")
    assert sorted_.verdict == [] and sorted_.pth == []
    assert "/usr/local/bin/pytest" in sorted_.evidence and "/usr" not in sorted_.evidence
    attacks = [("C", "/usr/bin/python3.11"), ("C", "/usr/bin/bash"), ("A", "/usr/local/bin/python3"),
               ("A", "/etc/ld.so.preload"), ("C", "/usr/lib/python3.11/os.py"), ("A", "/conftest.py"),
               ("C", "/etc/python3.11/sitecustomize.py"), ("A", "/app/.venv/lib/python3.11/site-packages/usercustomize.py")]
    assert len(sort_changes(attacks, "/app").verdict) == len(attacks)


def test_the_rewards_read_in_the_verifiers_command_are_the_verdict(tmp_path):
    """What test.sh left is read back in its own command; a reward file made, rewritten or erased after it
    ended is told apart from it (and the attempt's copy becomes what test.sh left)."""
    from agentcompass.formats.harbor.rewards import echo_rewards, keep_read_back, rewritten, split_rewards

    logs = tmp_path / "logs"
    logs.mkdir()
    script = echo_rewards("MK").replace("/logs/verifier", str(logs))
    quiet = subprocess.run(["bash", "-c", f"echo checking; {script}"], capture_output=True, text=True).stdout
    assert split_rewards(quiet, "MK") == ("checking\n", {})  # test.sh's output, whole
    (logs / "reward.txt").write_text("0\n")
    said = subprocess.run(["bash", "-c", f"printf 'no newline'; {script}"], capture_output=True, text=True).stdout
    output, read_back = split_rewards(said, "MK")
    assert output == "no newline" and read_back == {"reward.txt": b"0\n"}
    assert split_rewards(said[:-10], "MK")[1] is None  # cut short: the download decides
    (logs / "reward.txt").write_text("1\n")
    (logs / "reward.json").write_text('{"reward": 1}')
    assert rewritten(logs, read_back) == {"reward.txt": "rewritten", "reward.json": "made"}
    keep_read_back(logs, read_back)
    assert (logs / "reward.txt").read_text() == "0\n" and not (logs / "reward.json").exists()


def test_a_venv_made_by_virtualenv_or_uv_is_honest_work():
    venv_hook = "/app/.venv/lib/python3.11/site-packages/_virtualenv.pth"
    verdict, evidence = pth_verdicts({venv_hook: "import _virtualenv\n"}, recorded=set())
    assert verdict == [] and evidence == [venv_hook]
    verdict, _ = pth_verdicts({venv_hook: "import _virtualenv; import evil\n"}, recorded=set())
    assert verdict


def test_the_host_side_listing_of_a_containers_changes_is_the_engines(tmp_path):
    """overlay2's upper dir read on the host lists what `docker diff` lists: added, changed (in a lower
    layer), deleted (a whiteout)."""
    from agentcompass.providers.docker.changes import overlay_changes

    lower, upper = tmp_path / "lower", tmp_path / "upper"
    (lower / "usr" / "bin").mkdir(parents=True)
    (lower / "usr" / "bin" / "python3").write_text("image")
    (lower / "usr" / "bin" / "xargs").write_text("image")
    (upper / "usr" / "bin").mkdir(parents=True)
    (upper / "usr" / "bin" / "python3").write_text("agent")
    (upper / "root").mkdir()
    (upper / "root" / "new").write_text("agent")
    whiteout = upper / "usr" / "bin" / "xargs"
    if os.geteuid() == 0:  # a whiteout is a character device 0/0, which only root can make
        os.mknod(whiteout, 0o600 | stat.S_IFCHR, os.makedev(0, 0))
    listed = sorted(overlay_changes(str(upper), [str(lower)]))
    expected = [("A", "/root"), ("A", "/root/new"), ("C", "/usr"), ("C", "/usr/bin"), ("C", "/usr/bin/python3")]
    assert [c for c in listed if c[0] != "D"] == expected
    assert [c for c in listed if c[0] == "D"] == ([("D", "/usr/bin/xargs")] if os.geteuid() == 0 else [])


def test_a_reward_written_again_before_test_sh_starts_is_told():
    from agentcompass.formats.harbor.rewards import echo_early_rewards, split_early

    with_reward = subprocess.run(["bash", "-c", f"{echo_early_rewards('MK').replace('/logs/verifier', '/tmp/vi-none')}; echo out"],
                                 capture_output=True, text=True).stdout
    assert split_early(with_reward, "MK") == ("out\n", [])
    assert split_early("MK early reward.txt\nout\n", "MK") == ("out\n", ["reward.txt"])
