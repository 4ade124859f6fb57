"""What a Terminal-Bench task's docker-compose.yaml (or bare Dockerfile) says about its containers.

The official harness runs `docker compose up` with its T_BENCH_* variables (and the host's
environment) for interpolation. We read the file ourselves: the `client` service becomes the
trial's sandbox. The host's environment is deliberately not used (it may hold secrets): an unset
variable is empty, as compose makes it, unless the `${X:-default}` forms give a value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentcompass.errors import UserError

TEST_DIR = "/tests"
COMPOSE_FILES = ("docker-compose.yaml", "docker-compose.yml")
CLIENT = "client"
# ${NAME}, ${NAME:-default}, ${NAME-default}, ${NAME:?err}, ${NAME?err}, ${NAME:+alt}, ${NAME+alt}, $NAME, $$
VARIABLE = re.compile(r"\$(?:(\$)|\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?+])((?:[^{}]|\{[^{}]*\})*))?\}|([A-Za-z_][A-Za-z0-9_]*))")


def harness_variables(task_id: str) -> dict[str, str]:
    """The T_BENCH_* variables the official harness sets for compose, for a trial of `task_id`."""
    prefix = f"tb__{task_id}".replace(".", "-")
    return {
        "T_BENCH_TASK_DOCKER_CLIENT_CONTAINER_NAME": task_id.replace(".", "-"),
        "T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME": f"{prefix}__client",
        "T_BENCH_TASK_DOCKER_NAME_PREFIX": prefix,
        "T_BENCH_CONTAINER_LOGS_PATH": "/logs",
        "T_BENCH_CONTAINER_AGENT_LOGS_PATH": "/agent-logs",
        "T_BENCH_TEST_DIR": TEST_DIR,
        # Host directories in the original; here the sandbox's own /logs and /agent-logs.
        "T_BENCH_TASK_LOGS_PATH": "/logs",
        "T_BENCH_TASK_AGENT_LOGS_PATH": "/agent-logs",
    }


def interpolate(value: str, variables: dict[str, str]) -> str:
    """Compose's variable substitution; `${X:?msg}` for an unset X is a UserError, as compose refuses it."""

    def replace(match: re.Match[str]) -> str:
        dollar, name, operator, argument, bare = match.groups()
        if dollar:
            return "$"
        if bare:
            return variables.get(bare, "")
        current = variables.get(name)
        empty = current is None or (operator or "").startswith(":") and current == ""
        argument = interpolate(argument or "", variables)
        if operator in (":-", "-"):
            return argument if empty else current or ""
        if operator in (":?", "?"):
            if empty:
                raise UserError(f"docker-compose variable {name} is required: {argument or 'unset'}")
            return current or ""
        if operator in (":+", "+"):
            return "" if empty else argument
        return current or ""

    return VARIABLE.sub(replace, value)


@dataclass
class Service:
    """One compose service, with what the sandbox needs from it."""

    name: str
    build_context: Path | None = None
    dockerfile: str = "Dockerfile"
    build_args: dict[str, str] = field(default_factory=dict)
    image: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    workdir: str | None = None
    raw: dict[str, Any] = field(default_factory=dict)  # the interpolated service, for the docker provider


def read_yaml(path: Path) -> Any:
    import yaml

    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise UserError(f"{path}: not valid YAML ({' '.join(str(exc).split())})") from exc


def interpolate_tree(node: Any, variables: dict[str, str]) -> Any:
    if isinstance(node, str):
        return interpolate(node, variables)
    if isinstance(node, dict):
        return {key: interpolate_tree(value, variables) for key, value in node.items()}
    if isinstance(node, list):
        return [interpolate_tree(value, variables) for value in node]
    return node


def mapping(raw: Any) -> dict[str, str]:
    """A compose list of KEY=VALUE or a mapping; a bare KEY (taken from the host) is left out."""
    items = raw.items() if isinstance(raw, dict) else (str(e).split("=", 1) for e in raw or [] if "=" in str(e))
    return {str(key): "" if value is None else str(value) for key, value in items}


def read_service(compose: Path, name: str, spec: Any) -> Service:
    spec = spec or {}
    service = Service(name=name, env=mapping(spec.get("environment")), raw=spec,
                      workdir=str(spec.get("working_dir") or "") or None)
    build = spec.get("build")
    if build is not None:
        build = {"context": build} if isinstance(build, str) else dict(build)
        context = (compose.parent / str(build.get("context") or ".")).resolve()
        service.dockerfile = str(build.get("dockerfile") or "Dockerfile")
        if not (context / service.dockerfile).is_file():
            raise UserError(f"{compose}: service {name} builds from {service.dockerfile}, which is not in {context}")
        service.build_context = context
        service.build_args = mapping(build.get("args"))
    elif spec.get("image"):
        service.image = str(spec["image"])
    else:
        raise UserError(f"{compose}: service {name} has neither build nor image")
    return service


def read_services(task_dir: Path) -> dict[str, Service]:
    """The task's services, `client` first; a task with only a Dockerfile is one client service."""
    compose = next((task_dir / n for n in COMPOSE_FILES if (task_dir / n).is_file()), None)
    if compose is None:
        if (task_dir / "Dockerfile").is_file():
            # As the usual task template's compose file would give it.
            return {CLIENT: Service(name=CLIENT, build_context=task_dir, env={"TEST_DIR": TEST_DIR})}
        raise UserError(f"Terminal-Bench task '{task_dir.name}' has neither a Dockerfile nor a docker-compose.yaml")
    data = interpolate_tree(read_yaml(compose), harness_variables(task_dir.name))
    services = data.get("services") if isinstance(data, dict) else None
    if not isinstance(services, dict) or CLIENT not in services:
        raise UserError(f"{compose}: no `{CLIENT}` service; a Terminal-Bench task runs its agent in the client service")
    ordered = {CLIENT: services[CLIENT], **{k: v for k, v in services.items() if k != CLIENT}}
    return {str(name): read_service(compose, str(name), spec) for name, spec in ordered.items()}
