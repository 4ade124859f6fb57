"""The image's ENTRYPOINT runs as Harbor's docker environment runs it (with the keep-alive as its arguments):
a service it starts is up for the healthcheck and the tests. Harbor's hello-healthcheck (tests/data) passes
with the oracle and fails with nop; a service that ignores its arguments keeps the container alive itself; the
gcp VM's start-up script does the same with `docker run`."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from agentcompass.core.sandbox import SandboxSpec

from docker_sandbox import inspect, open_sandbox, plain_context, provider, unique  # noqa: F401 (fixtures)
from harbor_factory import make_recipe

pytestmark = pytest.mark.docker

EXAMPLES = Path(__file__).parent / "data" / "harbor_examples"
FETCH = "python3 -c 'import urllib.request as u; print(u.urlopen(\"http://127.0.0.1:8080/\", timeout=5).status)'"


def test_hello_healthcheck_passes_with_the_oracle_and_fails_with_nop(cli, base_image, tmp_path):
    conf = tmp_path / "conf"
    make_recipe(conf, "examples", EXAMPLES, runs_on_host=False)
    done = cli("validate", "examples", "--env", "docker", "--config-dir", str(conf), "--results-dir", str(tmp_path / "res"))
    assert done.returncode == 0, done.stdout + done.stderr
    [row] = [line.split() for line in done.stdout.splitlines() if line.startswith("hello-healthcheck")]
    assert row[1:] == ["passed", "failed", "ok"], done.stdout


@pytest.fixture
def server_image(base_image, tmp_path) -> Path:
    """A context whose ENTRYPOINT is a web server in the foreground that ignores its arguments."""
    context = tmp_path / "server"
    context.mkdir()
    (context / "Dockerfile").write_text(
        f'FROM {base_image}\nWORKDIR /app\n'
        'ENTRYPOINT ["sh", "-c", "exec python3 -m http.server 8080 --bind 127.0.0.1 --directory /app"]\n')
    return context


def test_an_entrypoint_service_that_ignores_its_arguments_keeps_the_container(open_sandbox, server_image):
    box = open_sandbox(build_context=server_image)
    assert box.exec(FETCH, timeout=30).stdout.strip() == "200"  # the image's own service, started by the engine
    assert "http.server" in box.exec("tr '\\0' ' ' < /proc/1/cmdline").stdout


def test_the_gcp_vm_runs_the_entrypoint_too(base_image, server_image, tmp_path, monkeypatch):
    """The start-up script a gcp trial VM runs, run here against this engine: the entrypoint's service is up;
    an entrypoint that exits gives way to the keep-alive, as on docker."""
    from agentcompass.providers.gcp import vm
    from agentcompass.providers.gcp.settings import GcpSettings

    monkeypatch.setattr(vm, "STATE_DIR", str(tmp_path / "state"))
    exits = tmp_path / "exits"
    exits.mkdir()
    (exits / "Dockerfile").write_text(f'FROM {base_image}\nWORKDIR /app\nENTRYPOINT ["/bin/false"]\n')
    names = []
    try:
        for context, check in ((server_image, FETCH), (exits, "echo alive")):
            image, name = unique("ac-test-gcp-entry"), unique("ac-test-gcp-entry")
            names.append((name, image))
            subprocess.run(["docker", "build", "-q", "-t", image, str(context)], check=True, capture_output=True)
            script = tmp_path / f"{name}.sh"
            script.write_text(vm.startup_script(name, SandboxSpec(name=name, image=image, workdir="/app", labels={
                "agentcompass": "1", "run": "pytest-gcp-entry"}), GcpSettings()))
            subprocess.run(["bash", str(script)], check=True, capture_output=True, timeout=120)
            assert (tmp_path / "state" / name / "status").read_text().strip() == "0"
            done = subprocess.run(["docker", "exec", name, "sh", "-c", check], capture_output=True, text=True)
            assert done.stdout.strip() in ("200", "alive"), (context.name, done)
    finally:
        for name, image in names:
            subprocess.run(["docker", "rm", "-f", name], capture_output=True)
            subprocess.run(["docker", "rmi", "-f", image], capture_output=True)
        shutil.rmtree(tmp_path / "state", ignore_errors=True)
