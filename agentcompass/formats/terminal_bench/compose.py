"""What a Terminal-Bench task's docker-compose.yaml (or bare Dockerfile) says about its containers.

The official harness runs `docker compose up` with its T_BENCH_* variables (and the host's
environment) for interpolation. We read the file ourselves: the `client` service becomes the
trial's sandbox. The host's environment is deliberately not used (it may hold secrets): an unset
variable is empty, as compose makes it, unless the `${X:-default}` forms give a value.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

from agentcompass.core.errors import UserError
from agentcompass.core.sandbox import ContainerSpec

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


def argv(value: Any) -> list[str] | None:
    """A compose command or entrypoint: a list, or a string split as a shell would."""
    if value is None:
        return None
    return [str(v) for v in value] if isinstance(value, list) else shlex.split(str(value))


def memory_mb(value: Any) -> int | None:
    """A compose memory size (`512m`, `2G`, `1gb`, bytes) in MiB."""
    if value is None:
        return None
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*", str(value).lower())
    if not match:
        raise UserError(f"docker-compose memory limit {value!r} is not a size such as 512m or 2g")
    scale = {"": 1 / 2**20, "k": 1 / 2**10, "m": 1, "g": 2**10, "t": 2**20}[match.group(2)]
    return max(1, int(float(match.group(1)) * scale))


def tmpfs_mounts(value: Any) -> dict[str, str]:
    entries = [value] if isinstance(value, str) else value or []
    return {str(e).split(":", 1)[0]: (str(e).split(":", 1) + [""])[1] for e in entries}


def volume_mounts(value: Any) -> dict[str, str]:
    """Mount point -> named volume (shared by the trial's services), or "" for a container's own.

    A host path (the harness's log directories included) becomes the container's own empty volume:
    the sandbox shares no files with the host."""
    mounts = {}
    for entry in value or []:
        if isinstance(entry, dict):
            source, target = str(entry.get("source") or ""), str(entry.get("target") or "")
        else:
            parts = str(entry).split(":")
            source, target = (parts[0], parts[1]) if len(parts) > 1 else ("", parts[0])
        if target:
            mounts[target] = "" if not source or source.startswith((".", "/", "~")) else source
    return mounts


def nanoseconds(value: Any) -> int | None:
    """A compose duration (`30s`, `1m30s`, `500ms`, a number of seconds) in nanoseconds."""
    if value is None:
        return None
    text = str(value).strip()
    parts = re.findall(r"(\d+(?:\.\d+)?)(h|ms|m|s|us|ns)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        try:
            return int(float(text) * 1e9)
        except ValueError:
            raise UserError(f"docker-compose duration {value!r} is not one such as 30s or 1m30s") from None
    scale = {"h": 3600e9, "m": 60e9, "s": 1e9, "ms": 1e6, "us": 1e3, "ns": 1}
    return int(sum(float(n) * scale[u] for n, u in parts))


def healthcheck(value: Any) -> dict[str, Any] | None:
    """A compose healthcheck in the engine's terms; None when absent or disabled."""
    if not isinstance(value, dict) or value.get("disable"):
        return None
    test = value.get("test")
    test = ["CMD-SHELL", test] if isinstance(test, str) else [str(t) for t in test or []]
    if not test or test == ["NONE"]:
        return None
    check = {"test": test, "interval": nanoseconds(value.get("interval")), "timeout": nanoseconds(value.get("timeout")),
             "retries": value.get("retries"), "start_period": nanoseconds(value.get("start_period"))}
    return {key: item for key, item in check.items() if item is not None}


def read_service(compose: Path, name: str, spec: Any, own_image: bool = False) -> ContainerSpec:
    """One service; `own_image`: its image is the task's (Harbor's `main`), so it may name neither build nor image."""
    spec = spec or {}
    limits = ((spec.get("deploy") or {}).get("resources") or {}).get("limits") or {}
    cpus = limits.get("cpus", spec.get("cpus"))
    service = ContainerSpec(
        name=name, env=mapping(spec.get("environment")), workdir=str(spec.get("working_dir") or "") or None,
        entrypoint=argv(spec.get("entrypoint")), command=argv(spec.get("command")),
        user=str(spec["user"]) if spec.get("user") is not None else None, tmpfs=tmpfs_mounts(spec.get("tmpfs")),
        volumes=volume_mounts(spec.get("volumes")), privileged=bool(spec.get("privileged")),
        cap_add=[str(c) for c in spec.get("cap_add") or []], cpus=float(cpus) if cpus is not None else None,
        memory_mb=memory_mb(limits.get("memory", spec.get("mem_limit"))),
        network_mode=str(spec["network_mode"]) if spec.get("network_mode") else None,
        healthcheck=healthcheck(spec.get("healthcheck")))
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
    elif not own_image:
        raise UserError(f"{compose}: service {name} has neither build nor image")
    service.depends_on = depends_on(spec.get("depends_on"))
    return service


def depends_on(value: Any) -> dict[str, str]:
    """A compose depends_on (a list, or a mapping with conditions) as service -> condition."""
    if isinstance(value, dict):
        return {str(k): str((v or {}).get("condition") or "service_started") for k, v in value.items()}
    return {str(name): "service_started" for name in value or []}


def read_services(task_dir: Path) -> dict[str, ContainerSpec]:
    """The task's services, `client` first; a task with only a Dockerfile is one client service."""
    compose = next((task_dir / n for n in COMPOSE_FILES if (task_dir / n).is_file()), None)
    if compose is None:
        if (task_dir / "Dockerfile").is_file():
            # As the usual task template's compose file would give it.
            return {CLIENT: ContainerSpec(name=CLIENT, build_context=task_dir, env={"TEST_DIR": TEST_DIR})}
        raise UserError(f"Terminal-Bench task '{task_dir.name}' has neither a Dockerfile nor a docker-compose.yaml")
    return compose_services(compose, CLIENT, harness_variables(task_dir.name), "a Terminal-Bench task")


def compose_services(compose: Path, client: str, variables: dict[str, str], who: str,
                     own_image: bool = False) -> dict[str, ContainerSpec]:
    """A compose file's services, `client` (the agent's sandbox) first, the others in start order.
    `own_image`: the client's image is the task's own, so its entry may name neither build nor image."""
    data = interpolate_tree(read_yaml(compose), variables)
    services = data.get("services") if isinstance(data, dict) else None
    if not isinstance(services, dict) or (client not in services and not own_image):
        raise UserError(f"{compose}: no `{client}` service; {who} runs its agent in the {client} service")
    ordered = {client: services.get(client), **{k: services[k] for k in start_order(services) if k != client}}
    return {str(name): read_service(compose, str(name), spec, own_image and name == client)
            for name, spec in ordered.items()}


def start_order(services: dict[str, Any]) -> list[str]:
    """Service names with each one after those it `depends_on` (file order otherwise), as compose starts them."""
    order: list[str] = []

    def visit(name: str, path: tuple[str, ...]) -> None:
        if name in order or name not in services:
            return
        if name in path:
            raise UserError(f"docker-compose services depend on each other in a cycle: {' -> '.join((*path, name))}")
        for needed in (services[name] or {}).get("depends_on") or []:  # a list, or a mapping with conditions
            visit(str(needed), (*path, name))
        order.append(name)

    for name in services:
        visit(str(name), ())
    return order
