"""Docker's hardening against what honest tasks do, and a compose file's privileges: the honest controls pass
with the oracle exactly as under Harbor (a server left running for the tests, a package installed with apt, an
agent as a non-root user, a sidecar reached by name); a compose task asking for the host's privileges is
refused before the run with one line, unless the user opts in."""

from __future__ import annotations

import json
import subprocess
import uuid

import pytest

from agentcompass.core.errors import UserError
from agentcompass.core.sandbox import ComposeSpec, ContainerSpec, SandboxSpec
from agentcompass.providers.docker.provider import DockerProvider
from harbor_factory import REWARD, USERS_DOCKERFILE, add_toml, make_recipe, make_sidecar_task, make_task

pytestmark = pytest.mark.docker

# A .deb built in the sandbox and installed with apt (offline: the package archive is out of reach), whose
# maintainer script makes a system user and hands it a directory, as real packages do.
BUILD_DEB = r"""set -e
mkdir -p /tmp/pkg/DEBIAN /tmp/pkg/usr/local/bin /tmp/pkg/opt/honest
printf 'Package: honest\nVersion: 1.0\nArchitecture: all\nMaintainer: t <t@example.org>\nDescription: t\n' > /tmp/pkg/DEBIAN/control
printf '#!/bin/sh\nset -e\nuseradd --system svc\nchown svc /opt/honest\n' > /tmp/pkg/DEBIAN/postinst
printf '#!/bin/sh\necho installed-honestly\n' > /tmp/pkg/usr/local/bin/honest
chmod 755 /tmp/pkg/DEBIAN/postinst /tmp/pkg/usr/local/bin/honest
dpkg-deb --build /tmp/pkg /tmp/honest.deb >/dev/null
cd /tmp && apt-get install -y ./honest.deb"""


def honest_tasks(root, base_image: str) -> list[str]:
    dockerfile = f"FROM {base_image}\n{USERS_DOCKERFILE}"
    make_task(root, "server-left-running", dockerfile=dockerfile,
              solve="mkdir -p /srv && echo up > /srv/state && (nohup python3 -m http.server 8000 --directory /srv >/dev/null 2>&1 &)",
              test="if [ \"$(python3 -c 'import urllib.request as u; print(u.urlopen(\"http://127.0.0.1:8000/state\").read().decode().strip())')\" = up ]; "
                   + REWARD)
    make_task(root, "installs-a-package", dockerfile=dockerfile, solve=BUILD_DEB,
              test=f'if [ "$(honest)" = installed-honestly ] && [ "$(stat -c %U /opt/honest)" = svc ]; {REWARD}')
    add_toml(make_task(root, "agent-as-a-user", dockerfile=dockerfile, solve="whoami > /app/who.txt",
                       test=f'if [ "$(cat /app/who.txt)" = agent ] && [ "$(stat -c %U /app/who.txt)" = agent ]; {REWARD}'),
             '[agent]\nuser = "agent"\n')
    make_sidecar_task(root, "sidecar-reached", base_image)
    return ["agent-as-a-user", "installs-a-package", "server-left-running", "sidecar-reached"]


def test_honest_controls_pass_under_the_hardening(cli, base_image, tmp_path):
    dataset, conf = tmp_path / "tasks", tmp_path / "conf"
    ids = honest_tasks(dataset, base_image)
    make_recipe(conf, "honest", dataset, runs_on_host=False)
    run_name = f"honest-{uuid.uuid4().hex[:8]}"
    done = cli("run", "honest", "oracle", "none", "--env", "docker", "--config-dir", str(conf), "--results-dir",
               str(tmp_path / "res"), "--run-name", run_name, "--task-concurrency", "4")
    assert done.returncode == 0, done.stderr
    left = subprocess.run(["docker", "network", "ls", "-q", "--filter", f"label=run={run_name}"], capture_output=True,
                          text=True, check=True).stdout
    assert not left.strip(), left  # the run's network (and every trial's) went with the run
    run_dir = tmp_path / "res" / run_name / "honest__oracle__none__docker"
    trials = [json.loads(line) for line in (run_dir / "trials.jsonl").read_text().splitlines()]
    assert sorted((t["task_id"], t["status"]) for t in trials) == [(i, "passed") for i in ids], [
        (t["task_id"], t["status"], t.get("message")) for t in trials]


COMPOSES = {
    "main-privileged": ("services:\n  main:\n    privileged: true\n", "privileged: true on the agent's container"),
    "sidecar-cap-add": ("services:\n  helper:\n    image: agentcompass/base:bookworm\n    cap_add: [SYS_ADMIN]\n",
                        "cap_add: [SYS_ADMIN] on sidecar helper"),
    "main-host-network": ("services:\n  main:\n    network_mode: host\n", "network_mode: host on the agent's container"),
}


@pytest.mark.parametrize("task_id", sorted(COMPOSES))
def test_a_compose_task_asking_for_the_hosts_privileges_is_refused_with_one_line(cli, base_image, tmp_path, task_id):
    compose, said = COMPOSES[task_id]
    dataset, conf = tmp_path / "tasks", tmp_path / "conf"
    task = make_task(dataset, task_id, solve="true", test="echo 1 > /logs/verifier/reward.txt",
                     dockerfile=f"FROM {base_image}\n")
    (task / "environment" / "docker-compose.yaml").write_text(compose)
    make_recipe(conf, "privileged", dataset, runs_on_host=False)
    done = cli("run", "privileged", "oracle", "none", "--env", "docker", "--config-dir", str(conf),
               "--results-dir", str(tmp_path / "res"), "--run-name", "p")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert said in lines[0] and '"allow_privileged": true' in lines[0], lines[0]
    assert not (tmp_path / "res").exists()


def test_allow_privileged_lets_the_user_run_such_a_task(base_image):
    spec = SandboxSpec(name="t", image=base_image,
                       compose=ComposeSpec(client=ContainerSpec(name="main", privileged=True), required=True))
    with pytest.raises(UserError, match="privileged: true"):
        DockerProvider().check(spec)
    DockerProvider(allow_privileged=True).check(spec)  # no refusal: the user trusts the task and the agent
