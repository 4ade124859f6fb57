"""Harbor tasks whose environment is a docker-compose.yaml: `main` is the agent's container, the other
services are sidecars on the trial's own network; docker runs them, the other providers refuse the task."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest

from agentcompass.core.errors import UserError
from agentcompass.formats.harbor.format import HarborFormat
from agentcompass.core.schema import Recipe
from harbor_factory import SIDECAR_COMPOSE, add_toml, make_recipe, make_sidecar_task, make_task

BASE = "agentcompass/base:bookworm"


def harbor(dataset: Path) -> HarborFormat:
    return HarborFormat(Recipe(name="h", format="harbor", source={"path": str(dataset)}))


def test_main_is_the_agents_container_and_the_others_are_sidecars(tmp_path):
    make_sidecar_task(tmp_path / "ds", "side", BASE)
    [task] = harbor(tmp_path / "ds").load()
    compose = task.compose
    assert compose is not None and compose.required and compose.client.name == "main"
    assert compose.client.image is None and task.build_context == tmp_path / "ds" / "side" / "environment"
    assert compose.client.command == ["sh", "-c", "sleep infinity"]  # kept alive, as Harbor's base keeps it
    assert compose.client.depends_on == {"api": "service_healthy"}
    [api] = compose.services
    assert api.name == "api" and api.build_context == tmp_path / "ds" / "side" / "environment" / "api"
    assert api.healthcheck["retries"] == 30 and api.healthcheck["interval"] == 1_000_000_000
    assert [(a["service"], a["source"]) for a in task.data["artifacts"]] == [("main", "/app/answer.txt"), ("api", "/var/log/api/requests.log")]


def test_an_artifact_of_an_unknown_service_is_refused_at_load(tmp_path):
    task = make_task(tmp_path / "ds", "t", solve="true", test="true")
    add_toml(task, 'artifacts = [{ source = "/var/log/x", service = "db" }]\n')
    [refused] = harbor(tmp_path / "ds").load()  # refused alone: a dataset's other tasks would still run
    assert "names service 'db', which environment/docker-compose.yaml does not define" in refused.refusal


def test_one_path_from_two_services_is_refused_at_load(tmp_path):
    task = make_task(tmp_path / "ds", "t", solve="true", test="true")
    (task / "environment" / "docker-compose.yaml").write_text("services:\n  api:\n    image: x\n")
    add_toml(task, 'artifacts = ["/var/log/api/requests.log", { source = "/var/log/api/requests.log", service = "api" }]\n')
    [refused] = harbor(tmp_path / "ds").load()
    assert "artifact '/var/log/api/requests.log' is named twice" in refused.refusal


def test_a_compose_file_without_main_gives_main_the_tasks_image(tmp_path):
    task = make_task(tmp_path / "ds", "t", solve="true", test="true", dockerfile=f"FROM {BASE}\n")
    (task / "environment" / "docker-compose.yaml").write_text(
        "services:\n  cache:\n    image: ${MAIN_IMAGE_NAME}\n    command: [sleep, infinity]\n")
    [loaded] = harbor(tmp_path / "ds").load()
    assert loaded.compose.client.name == "main" and loaded.compose.services[0].image == "hb__t"


# -- providers without sidecars refuse the task before the run, with one line -----------------------
def test_local_refuses_sidecars(cli, tmp_path):
    dataset, conf = tmp_path / "tasks", tmp_path / "conf"
    make_sidecar_task(dataset, "side", BASE)
    make_recipe(conf, "side", dataset, runs_on_host=True)
    done = cli("run", "side", "oracle", "none", "--env", "local", "--config-dir", str(conf),
               "--results-dir", str(tmp_path / "res"), "--run-name", "r")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert "environment/docker-compose.yaml sidecar services (api)" in lines[0] and "local provider" in lines[0]
    assert not (tmp_path / "res").exists()


@pytest.mark.parametrize("provider", ["modal", "gcp"])
def test_cloud_providers_refuse_sidecars(tmp_path, provider):
    from agentcompass.core.registry import resolve

    make_sidecar_task(tmp_path / "ds", "side", BASE)
    [task] = harbor(tmp_path / "ds").load()
    settings = {"token_id": "ak-test", "token_secret": "as-test"} if provider == "modal" else {}
    with pytest.raises(UserError, match=rf"sidecar services \(api\), which the {provider} provider cannot honour"):
        resolve("provider", provider)(**settings).check(task.sandbox_spec("side", {}, None))


def test_terminal_bench_services_stay_optional(tmp_path):
    """A Terminal-Bench task's compose file does not make its client unrunnable elsewhere (as before)."""
    from agentcompass.providers.local.provider import LocalProvider
    from agentcompass.core.sandbox import ComposeSpec, ContainerSpec, SandboxSpec

    compose = ComposeSpec(client=ContainerSpec(name="client"), services=[ContainerSpec(name="db", image="x")])
    LocalProvider().check(SandboxSpec(name="t", compose=compose))


# -- docker: sidecars on the trial's network, their artifacts collected, everything removed after ----
@pytest.mark.docker
def test_sidecar_task_passes_on_docker_and_leaves_nothing(cli, base_image, tmp_path):
    dataset, conf = tmp_path / "tasks", tmp_path / "conf"
    make_sidecar_task(dataset, "side", base_image)
    # A second sidecar the first depends on (healthy): started and waited for before it.
    compose = dataset / "side" / "environment" / "docker-compose.yaml"
    compose.write_text(SIDECAR_COMPOSE.replace("      context: ./api\n", "      context: ./api\n    depends_on:\n"
                                               "      gate:\n        condition: service_completed_successfully\n")
                       + "  gate:\n    image: " + base_image + "\n    command: [\"sh\", \"-c\", \"sleep 1; exit 0\"]\n")
    make_recipe(conf, "side", dataset, runs_on_host=False)
    run_name = f"hc-{uuid.uuid4().hex[:8]}"
    done = cli("run", "side", "oracle", "none", "--env", "docker", "--config-dir", str(conf),
               "--results-dir", str(tmp_path / "res"), "--run-name", run_name)
    assert done.returncode == 0, done.stderr[-3000:]
    trial = tmp_path / "res" / run_name / "side__oracle__none__docker" / "tasks" / "side" / "attempt-1"
    [row] = map(json.loads, (trial.parent.parent.parent / "trials.jsonl").read_text().splitlines())
    assert row["reward"] == 1.0 and row["details"]["environment_mode"] == "separate", row
    assert "GET /secret.txt" in (trial / "artifacts" / "var" / "log" / "api" / "requests.log").read_text()
    assert (trial / "artifacts" / "app" / "answer.txt").read_text().strip() == "sidecar-says-42"
    for kind in ("ps", "network"):
        left = subprocess.run(["docker", kind, *(["-a"] if kind == "ps" else ["ls"]), "-q", "--filter", f"label=run={run_name}"],
                              capture_output=True, text=True, check=True).stdout
        assert left.strip() == "", (kind, left)
