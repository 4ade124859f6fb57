"""network_mode = "allowlist" on docker, per phase (the network-policy cases Harbor's own docker environment
refuses): the trial's container reaches the phase's allowed hosts through its egress proxy, and nothing else.

The "internet" is a network of the test's own with two web servers, allowed.test and denied.test; the
provider's `network` (what a public phase joins, and where the proxy reaches out) is that network."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest

from harbor_factory import REWARD, add_toml, make_recipe, make_task

# open / closed: whether a GET of the URL answers, through the proxy (the default) or directly.
PROBE = """\
import sys, urllib.request as u
opener = u.build_opener(u.ProxyHandler({})) if sys.argv[2:] == ["direct"] else u.build_opener()
try:
    opener.open(sys.argv[1], timeout=5).read()
    print("open")
except Exception:
    print("closed")
"""
AGENT_PROBES = ("p() { python3 /usr/local/bin/probe.py \"$@\"; }; "
                "echo $(p http://allowed.test:8000/) $(p http://denied.test:8000/) $(p http://allowed.test:8000/ direct)")


def allowlist_task(root: Path, task_id: str, base_image: str, toml: str, agent_sees: str, verifier_sees: str) -> None:
    """The agent records what it reaches; the verifier checks that and what it reaches itself."""
    task = make_task(root, task_id, dockerfile=f"FROM {base_image}\nCOPY probe.py /usr/local/bin/probe.py\nWORKDIR /app\n",
                     solve=f"({AGENT_PROBES}) > /app/agent.txt",
                     test=f'if [ "$(cat /app/agent.txt)" = "{agent_sees}" ] && [ "$({AGENT_PROBES})" = "{verifier_sees}" ]; {REWARD}')
    (task / "environment" / "probe.py").write_text(PROBE)
    add_toml(task, toml)


@pytest.fixture
def outside(base_image):
    """A network standing for the internet, with allowed.test and denied.test on it; removed after."""
    name = f"hc-out-{uuid.uuid4().hex[:8]}"
    subprocess.run(["docker", "network", "create", "--label", f"run={name}", name], check=True, capture_output=True)
    try:
        for host in ("allowed.test", "denied.test"):
            subprocess.run(["docker", "run", "-d", "--name", f"{name}-{host.split('.')[0]}", "--label", f"run={name}",
                            "--network", name, "--network-alias", host, base_image, "python3", "-m", "http.server", "8000"],
                           check=True, capture_output=True)
        yield name
    finally:
        for host in ("allowed", "denied"):
            subprocess.run(["docker", "rm", "-f", f"{name}-{host}"], capture_output=True)
        subprocess.run(["docker", "network", "rm", name], capture_output=True)


@pytest.mark.docker
def test_allowlists_hold_per_phase_on_docker(cli, base_image, outside, tmp_path):
    dataset, conf = tmp_path / "tasks", tmp_path / "conf"
    # agent: allowlist, verifier: public (proxied and direct alike).
    allowlist_task(dataset, "agent-allowlist", base_image, '[agent]\nallowed_hosts = ["allowed.test"]\n'
                   '[verifier]\nnetwork_mode = "public"\n', "open closed closed", "open open open")
    # every phase: [environment]'s allowlist (a subdomain pattern that matches nothing here).
    allowlist_task(dataset, "all-allowlist", base_image, '[environment]\nallowed_hosts = ["denied.test", "*.example.test"]\n',
                   "closed open closed", "closed open closed")
    # agent: no network at all, verifier: allowlist.
    allowlist_task(dataset, "verifier-allowlist", base_image, '[agent]\nnetwork_mode = "no-network"\n'
                   '[verifier]\nallowed_hosts = ["allowed.test"]\n', "closed closed closed", "open closed closed")
    make_recipe(conf, "allow", dataset, runs_on_host=False)
    run_name = f"ha-{uuid.uuid4().hex[:8]}"
    done = cli("validate", "allow", "--env", "docker", "--env-params", json.dumps({"network": outside}),
               "--config-dir", str(conf), "--results-dir", str(tmp_path / "res"), "--run-name", run_name)
    run_dir = tmp_path / "res" / run_name / "allow__oracle__none__docker"
    rows = {r["task_id"]: r for r in map(json.loads, (run_dir / "trials.jsonl").read_text().splitlines())}
    assert done.returncode == 0, (done.stderr[-3000:], rows)
    assert all(row["reward"] == 1.0 for row in rows.values()), rows
    for kind in (["ps", "-a"], ["network", "ls"]):  # proxies and trial networks went with their trials
        left = subprocess.run(["docker", *kind, "-q", "--filter", f"label=run={run_name}"], capture_output=True, text=True)
        assert left.stdout.strip() == "", (kind, left.stdout)


@pytest.mark.docker
def test_an_allowlist_beside_sidecars_is_refused(cli, base_image, tmp_path):
    from harbor_factory import make_sidecar_task

    dataset, conf = tmp_path / "tasks", tmp_path / "conf"
    add_toml(make_sidecar_task(dataset, "side", base_image), '[agent]\nallowed_hosts = ["pypi.org"]\n')
    make_recipe(conf, "side", dataset, runs_on_host=False)
    done = cli("run", "side", "oracle", "none", "--env", "docker", "--config-dir", str(conf),
               "--results-dir", str(tmp_path / "res"), "--run-name", f"ha-{uuid.uuid4().hex[:8]}")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert 'network_mode = "allowlist" with docker-compose services' in lines[0] and "docker provider" in lines[0]
