"""The docker provider's images: task images built once per content, base images, failed builds, a missing engine."""

from __future__ import annotations

import json
import threading
import uuid
from pathlib import Path

import pytest

from agentcompass.core.sandbox import SandboxSpec

from docker_sandbox import provider, unique, write_recipe, write_task  # noqa: F401 (a fixture)

pytestmark = pytest.mark.docker


# -- images -------------------------------------------------------------------------------------------
def test_task_image_is_built_once_per_content(base_image, provider, tmp_path):
    from agentcompass.providers.docker.provider import DockerProvider

    context = tmp_path / "task-x" / "environment"
    context.mkdir(parents=True)
    (context / "Dockerfile").write_text(f"FROM {base_image}\nRUN echo {uuid.uuid4().hex} > /stamp\n")
    logs = [tmp_path / f"trial{i}" for i in range(3)]
    boxes = []
    fresh = DockerProvider()

    def open_one(log_dir: Path) -> None:
        spec = SandboxSpec(name=unique("ac-test"), build_context=context, labels={"agentcompass": "1"}, log_dir=log_dir)
        boxes.append(fresh.open(spec))

    for log_dir in logs:
        log_dir.mkdir()
    threads = [threading.Thread(target=open_one, args=(d,)) for d in logs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert len(boxes) == 3
        stamps = {box.exec("cat /stamp").stdout for box in boxes}
        assert len(stamps) == 1
        built = [d for d in logs if (d / "build.log").read_text().startswith("building")]
        assert len(built) == 1
        # A new provider (a later run) reuses the tag: nothing is built.
        again = DockerProvider().open(SandboxSpec(name=unique("ac-test"), build_context=context, log_dir=tmp_path))
        boxes.append(again)
        assert "cached" in (tmp_path / "build.log").read_text()
        assert again.exec("cat /stamp").stdout in stamps
    finally:
        for box in boxes:
            box.close()


def test_a_rebuilt_base_image_rebuilds_the_task_image(base_image, tmp_path):
    """The cache key includes the FROM image's id: a task never runs on a stale base."""
    import io

    import docker

    from agentcompass.providers.docker.provider import DockerProvider

    client = docker.from_env()
    base_tag = f"agentcompass-test/base-{uuid.uuid4().hex[:8]}:latest"
    context = tmp_path / "task-rebase" / "environment"
    context.mkdir(parents=True)
    (context / "Dockerfile").write_text(f"FROM {base_tag}\nRUN cp /basever /seen\n")

    def make_base(version: str) -> None:
        dockerfile = f"FROM {base_image}\nRUN echo {version} > /basever\n".encode()
        client.images.build(fileobj=io.BytesIO(dockerfile), tag=base_tag, rm=True)

    def seen(log_dir: Path) -> str:
        log_dir.mkdir()
        box = DockerProvider().open(SandboxSpec(name=unique("ac-test"), build_context=context, log_dir=log_dir))
        try:
            return box.exec("cat /seen").stdout.strip()
        finally:
            box.close()

    try:
        make_base("v1")
        assert seen(tmp_path / "a") == "v1"
        make_base("v2")
        assert seen(tmp_path / "b") == "v2"
        assert (tmp_path / "b" / "build.log").read_text().startswith("building")
    finally:
        client.images.remove(base_tag, force=True)


def test_from_images_skips_scratch_and_own_stages():
    from agentcompass.providers.docker.images import from_images

    dockerfile = "FROM --platform=linux/amd64 python:3.12 AS build\nRUN x\nFROM build\nFROM scratch\nfrom debian:12\n"
    assert from_images(dockerfile) == ["python:3.12", "debian:12"]


def test_base_images_fill_in_build_args():
    from agentcompass.providers.docker.images import base_images

    dockerfile = "ARG BASE_IMAGE=python:3.11-slim\nARG TAG\nFROM ${BASE_IMAGE}\nFROM debian:$TAG AS x\n"
    assert base_images(dockerfile, {}) == ["python:3.11-slim", "debian:"]
    assert base_images(dockerfile, {"BASE_IMAGE": "agentcompass/base:bookworm", "TAG": "12"}) == [
        "agentcompass/base:bookworm", "debian:12"]


def test_a_base_neither_local_nor_in_a_registry_stops_before_the_run(cli, base_image, tmp_path):
    """The demo builds FROM the recipe's base; one that cannot be had is one line, nothing written."""
    base = "127.0.0.1:1/agentcompass/no-such-base:x"  # a registry that refuses at once, on this machine
    run = cli("run", "demo", "oracle", "none", "--env", "docker", "--results-dir", str(tmp_path / "out"),
              env={"AGENTCOMPASS_BASE_IMAGE": base})
    assert run.returncode == 2, run.stderr
    [line] = run.stderr.strip().splitlines()
    assert base in line and "build-base-image.sh" in line and "AGENTCOMPASS_BASE_IMAGE" in line
    assert not (tmp_path / "out").exists()


def test_a_failed_build_is_recorded_once_and_never_retried(cli, base_image, tmp_path):
    dataset, config_dir = tmp_path / "data", tmp_path / "conf"
    write_task(dataset, "broken-env", f"FROM {base_image}\nRUN echo building-broken && exit 3\n")
    write_recipe(config_dir, "brokenbench", dataset)
    run = cli("run", "brokenbench", "oracle", "none", "--env", "docker", "--config-dir", str(config_dir),
              "--results-dir", str(tmp_path / "out"), "--run-name", "b", "--k", "3", "--task-concurrency", "1",
              "run.retry_backoff_s=0.1")
    assert run.returncode == 0, run.stderr
    run_dir = tmp_path / "out" / "b" / "brokenbench__oracle__none__docker"
    trials = sorted((json.loads(line) for line in (run_dir / "trials.jsonl").read_text().splitlines()),
                    key=lambda t: t["attempt"])
    assert [(t["status"], t["error_category"], t["retries"]) for t in trials] == [("error", "infra", 0)] * 3
    assert "not built again" not in trials[0]["message"]
    assert all("not built again" in t["message"] for t in trials[1:])
    built = [p for p in run_dir.rglob("build.log") if "building-broken" in p.read_text()]
    assert len(built) == 1


def test_failing_dockerfile_is_an_infra_error_naming_the_task(cli, base_image, tmp_path):
    dataset, config_dir = tmp_path / "data", tmp_path / "conf"
    write_task(dataset, "broken-env", f"FROM {base_image}\nRUN echo building-broken && exit 3\n")
    write_recipe(config_dir, "brokenbench", dataset)
    run = cli("run", "brokenbench", "oracle", "none", "--env", "docker", "--config-dir", str(config_dir),
              "--results-dir", str(tmp_path / "out"), "--run-name", "b", "--max-retries", "0")
    assert run.returncode == 0, run.stderr
    run_dir = tmp_path / "out" / "b" / "brokenbench__oracle__none__docker"
    (trial,) = [json.loads(line) for line in (run_dir / "trials.jsonl").read_text().splitlines()]
    assert (trial["status"], trial["error_category"]) == ("error", "infra")
    assert "broken-env" in trial["message"] and "build" in trial["message"]
    assert "building-broken" in (run_dir / "tasks" / "broken-env" / "attempt-1" / "build.log").read_text()


def test_missing_image_is_one_line_naming_image_and_override(cli, base_image, tmp_path):
    image = f"agentcompass/no-such-image:{uuid.uuid4().hex[:8]}"
    run = cli("run", "demo", "oracle", "none", "--env", "docker", "--env-params", json.dumps({"image": image}),
              "--results-dir", str(tmp_path))
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1
    assert image in lines[0] and "--env-params" in lines[0]
    assert list(tmp_path.iterdir()) == []


def test_no_engine_is_one_line_naming_docker_host(cli, tmp_path):
    run = cli("run", "demo", "oracle", "none", "--env", "docker", "--results-dir", str(tmp_path),
              env={"DOCKER_HOST": f"unix://{tmp_path}/nothing.sock"})
    assert run.returncode == 2
    assert len(run.stderr.strip().splitlines()) == 1
    assert "DOCKER_HOST" in run.stderr and "nothing.sock" in run.stderr
    # What a pip user can do: start the engine (no script of this repository's checkout).
    assert "systemctl start docker" in run.stderr and "dockerd" in run.stderr and "scripts/" not in run.stderr
