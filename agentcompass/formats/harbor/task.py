"""A Harbor task dir read into a Task: task.toml validated against Harbor's schema, environment/ listed once
(Dockerfile, workspace, docker-compose.yaml), the phases' networks and users, [[steps]], artifacts and
[[verifier.collect]] hooks checked before any trial runs. A task that asks for what agentcompass cannot do
raises UserError here; the format refuses that task alone."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import tomli  # the compiled twin of tomllib: several times faster over a dataset of thousands of task.toml
from pydantic import ValidationError

from agentcompass.core.errors import UserError
from agentcompass.core.results import read_if_present
from agentcompass.core.sandbox import ComposeSpec
from agentcompass.core.schema import Recipe
from agentcompass.core.task import Task
from agentcompass.formats.base import render_instruction
from agentcompass.formats.harbor.collect import ARTIFACTS_DIR, MAIN
from agentcompass.formats.harbor.fields import is_free_form
from agentcompass.formats.harbor.rewards import VERIFIER_DIR
from agentcompass.formats.harbor.schema import Artifact, CollectHook, Environment, Step, TaskConfig, unknown_fields
from agentcompass.formats.harbor.verifier import environment_mode, separate_verifier
from agentcompass.formats.terminal_bench.compose import COMPOSE_FILES, compose_services

DEFAULT_AGENT_TIMEOUT = None  # Harbor 0.26: no agent timeout unless the task, recipe or harness sets one
DEFAULT_VERIFY_TIMEOUT = 600.0  # Harbor 0.26's VerifierConfig.timeout_sec
WARNED: set[str] = set()  # the unknown-field warnings this process printed


def artifact_paths(task_dir: Path | str, artifacts: list[str | Artifact], compose: ComposeSpec | None) -> list[dict[str, Any]]:
    """task.toml's top-level artifacts as {service, source, exclude}: paths, or tables with a `source` path,
    the compose `service` holding it (main, the agent's, by default) and tar `exclude` patterns."""
    if not artifacts:
        return []
    found = [{"service": a.service or MAIN, "source": a.source, "exclude": list(a.exclude)} if isinstance(a, Artifact)
             else {"service": MAIN, "source": a, "exclude": []} for a in artifacts]
    services = {MAIN, *(s.name for s in compose.services)} if compose else {MAIN}
    where = f"{task_dir}/task.toml"
    for service, path in ((a["service"], a["source"]) for a in found):
        if not path.startswith("/") or ".." in path.split("/"):
            raise UserError(f"{where}: artifacts must be absolute paths without '..', got {path!r}")
        if service not in services:
            raise UserError(f"{where}: artifact {path!r} names service {service!r}, which environment/docker-compose.yaml "
                            f"does not define (services: {', '.join(sorted(services))})")
    paths = [a["source"] for a in found]
    clash = next((path for path in paths if paths.count(path) > 1), None)
    if clash:  # both would land on one path in the trial dir and in a separate verifier
        raise UserError(f"{where}: artifact {clash!r} is named twice (from different services?); collect each path once")
    return found


def collect_hooks(task_dir: str, config: TaskConfig, compose: ComposeSpec | None,
                  step_hooks: list[CollectHook] = ()) -> list[dict[str, Any]]:
    """[[verifier.collect]] (then a step's own) as {command, service, timeout_sec, user}; a hook's service must be
    main or one environment/docker-compose.yaml defines (as Harbor checks before the trial)."""
    services = {MAIN, *(s.name for s in compose.services)} if compose else {MAIN}
    hooks = []
    for hook in [*config.verifier.collect, *step_hooks]:
        if hook.service not in services:
            raise UserError(f"{task_dir}/task.toml: [[verifier.collect]] runs in service {hook.service!r}, which "
                            + ("environment/docker-compose.yaml does not define" if compose else "needs an environment/docker-compose.yaml")
                            + f" (services: {', '.join(sorted(services))})")
        hooks.append({"command": hook.command, "service": hook.service, "timeout_sec": hook.timeout_sec,
                      "user": str(hook.user) if hook.user is not None else None})
    return hooks


def compose_spec(compose: Path, task_id: str, environment: Environment, image: str | None,
                 build_args: dict[str, str]) -> ComposeSpec:
    """environment/docker-compose.yaml over Harbor's base: `main` is the agent's container, of the task's own
    image (docker_image or environment/Dockerfile), kept alive as Harbor keeps it; the others are sidecars."""
    variables = {  # what Harbor's own compose files define, for the task's file to use
        "MAIN_IMAGE_NAME": image or f"hb__{task_id.lower()}", "CONTEXT_DIR": str(compose.parent),
        "CPUS": str(environment.cpus or 1), "MEMORY": f"{environment.memory_mb or 2048}M",
        "ENV_VERIFIER_LOGS_PATH": VERIFIER_DIR, "ENV_AGENT_LOGS_PATH": "/logs/agent", "ENV_ARTIFACTS_PATH": ARTIFACTS_DIR,
    }
    services = compose_services(compose, MAIN, variables, "a Harbor task", own_image=True)
    main = services.pop(MAIN)
    # main's image is the task's, whatever the file says of it (Harbor's base defines it).
    main.image, main.build_context, main.dockerfile = None, None, "Dockerfile"
    main.build_args = {**build_args, **main.build_args}
    if main.entrypoint is None and main.command is None:
        main.command = ["sh", "-c", "sleep infinity"]
    return ComposeSpec(client=main, services=list(services.values()), required=True)


def task_dirs(root: Path) -> list[str]:
    """The dataset's task dirs: its subdirectories (hidden ones too, as a glob of */task.toml finds them), by name;
    whether each holds a task.toml is told by reading it (one open, not a stat and then an open). None where the
    root is no directory or cannot be listed, as the glob found none there."""
    try:
        with os.scandir(root) as entries:
            return [os.path.join(root, name) for name in sorted(e.name for e in entries if e.is_dir())]
    except (NotADirectoryError, PermissionError):
        return []


def environment_files(task_dir: str) -> dict[str, os.DirEntry[str]]:
    """environment/'s entries by name: one listing tells which of Dockerfile, workspace and the compose files exist."""
    try:
        with os.scandir(f"{task_dir}/environment") as entries:
            return {entry.name: entry for entry in entries}
    except (FileNotFoundError, NotADirectoryError):
        return {}
    except OSError as exc:
        raise UserError(f"{task_dir}/environment: {exc}") from exc


def read_config(task_dir: Path | str) -> TaskConfig:
    config = read_config_if_present(task_dir)
    if config is None:
        raise UserError(f"{task_dir}/task.toml: no such file")
    return config


def read_config_if_present(task_dir: Path | str) -> TaskConfig | None:
    """The task's task.toml, validated; None where the dir has none (it is no task)."""
    path = f"{task_dir}/task.toml"
    try:
        data = read_if_present(path)
        if data is None:
            if os.path.exists(path):  # there, but no file (a dir): an error, as reading it is
                raise IsADirectoryError("not a file")
            return None
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: {exc}") from exc
    if "\r" in text:  # as a text-mode read gives it: universal newlines
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    try:
        return TaskConfig.model_validate(tomli.loads(text))
    except tomli.TOMLDecodeError as exc:
        raise UserError(f"{path}: {exc}") from exc
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise UserError(f"{path}: {where}: {first['msg']}; see Harbor's task.toml schema") from None


def warn_unknown(benchmark: str, configs: dict[str, TaskConfig]) -> None:
    """One line naming every key under [task] or [metadata] no Harbor schema 1.0-1.4 field matches: such keys
    cannot change a verdict, so they are ignored, but not silently (elsewhere they refuse the task)."""
    seen: dict[str, int] = {}
    for config in configs.values():
        for name in dict.fromkeys(n for n in unknown_fields(config) if is_free_form(n)):
            seen[name] = seen.get(name, 0) + 1
    if not seen:
        return
    names = ", ".join(f"{name} ({count} task{'s' if count > 1 else ''})" for name, count in seen.items())
    line = f"warning: benchmark '{benchmark}': task.toml fields unknown to Harbor schema 1.0-1.4, ignored: {names}"
    if line not in WARNED:  # validate loads the tasks once per harness: say it once
        WARNED.add(line)
        print(line, file=sys.stderr, flush=True)


def strings(values: dict[str, Any]) -> dict[str, str]:
    return {k: str(v) for k, v in values.items()}


def load_task(recipe: Recipe, task_dir: Path | str, config: TaskConfig | None = None) -> Task:
    """One task dir as a Task (raising UserError where it asks for what agentcompass cannot do)."""
    # Plain strings and one listing of environment/, not Path objects and a stat per file: a dataset
    # may hold thousands of tasks, all loaded before the first trial starts. (str() of a Path ends in no '/'.)
    task_dir = str(task_dir)
    config = config or read_config(task_dir)
    task_id = os.path.basename(task_dir)
    unknown = [name for name in unknown_fields(config) if not is_free_form(name)]
    if unknown:
        raise UserError(f"{task_dir}/task.toml: {', '.join(unknown)}: not in Harbor's task.toml schema (1.0-1.4); "
                        f"outside [task] and [metadata] a key could change the verdict, so the task is refused; "
                        f"fix its spelling or remove it")
    environment = config.environment
    # A recipe's image (e.g. its per-provider override: a mirror) wins over the task's own docker_image.
    image = (recipe.image.format(task_id=task_id) if recipe.image else None) or environment.docker_image
    env_dir = f"{task_dir}/environment"
    files = environment_files(task_dir)
    has_dockerfile = "Dockerfile" in files and files["Dockerfile"].is_file()
    seed = files["workspace"] if "workspace" in files and files["workspace"].is_dir() else None
    compose_file = next((files[n].path for n in COMPOSE_FILES if n in files and files[n].is_file()), None)
    instruction = (read_if_present(f"{task_dir}/instruction.md") or b"").decode()
    baseline = environment.baseline_network()
    if recipe.allow_internet is not None:
        baseline = "public" if recipe.allow_internet else "no-network"
    phases = {"agent": config.agent.network_mode or baseline, "verifier": config.verifier.network_mode or baseline}
    # An allowlist phase's hosts: its own, else [environment]'s (whose mode it then shares).
    hosts = {name: tuple(policy.allowed_hosts or environment.allowed_hosts)
             for name, policy in (("agent", config.agent), ("verifier", config.verifier)) if phases[name] == "allowlist"}
    declared = any(p.network_mode for p in (environment, config.agent, config.verifier))
    users = {f"[{name}] user": str(user) for name, user in (("agent", config.agent.user), ("verifier", config.verifier.user))
             if user is not None}
    build_args = dict(recipe.build_args)
    compose = compose_spec(Path(compose_file), task_id, environment, image, build_args) if compose_file else None
    steps = [step_data(recipe, Path(task_dir), config, step, compose) for step in config.steps or []]
    if environment.os != "linux":  # every provider here runs Linux sandboxes
        raise UserError(f"task '{task_id}' needs [environment] os = \"{environment.os}\", which no provider "
                        f"here can honour (they run Linux sandboxes); leave the task out")
    if environment.tpu is not None:
        raise UserError(f"task '{task_id}' asks for [environment.tpu] ({environment.tpu.type}, "
                        f"{environment.tpu.topology}), which no provider here can attach; leave the task out")
    rendered = render_instruction(recipe, instruction=instruction, task_id=task_id)
    mode = environment_mode(task_dir, config, recipe.params.get("verifier_mode"))
    if steps and mode == "separate":
        raise UserError(f"{task_dir}/task.toml: multi-step tasks with a separate verifier are not supported yet; "
                        f"use environment_mode = \"shared\" or leave the task out")
    verifier = separate_verifier(task_dir, config, image) if mode == "separate" else None
    hooks = collect_hooks(task_dir, config, compose)
    return Task(
        id=task_id,
        instruction=rendered,
        workdir=recipe.workdir or environment.workdir or "/app",
        image=image,
        # With an image too: where no registry has it, docker builds environment/Dockerfile instead (as Harbor can).
        build_context=Path(env_dir) if has_dockerfile else None,
        build_args=build_args,
        runs_on_host=recipe.runs_on_host,
        seed_dir=Path(seed.path) if seed is not None else None,
        env={**(compose.client.env if compose else {}), **recipe.env, **strings(environment.env)},
        cpus=recipe.resources.cpus or environment.cpus,
        memory_mb=recipe.resources.memory_mb or environment.memory_mb,
        storage_mb=environment.storage_mb,
        gpus=environment.gpus,
        allow_internet=baseline == "public",
        network_modes=tuple(sorted({baseline, *phases.values()})) if declared else (),
        agent_user=str(config.agent.user) if config.agent.user is not None else None,
        users={**users, **{f"[[steps]] {s['name']!r} [{phase}] user": s[f"{phase}_user"]
                           for s in steps for phase in ("agent", "verifier") if s[f"{phase}_user"]},
               **{f"[[verifier.collect]] user (in {h['service']})": h["user"]
                  for h in [*hooks, *(h for s in steps for h in s["collect"])] if h["user"]}},
        agent_timeout_s=recipe.timeouts.agent or config.agent.timeout_sec or DEFAULT_AGENT_TIMEOUT,  # None: no limit
        verify_timeout_s=recipe.timeouts.verify or config.verifier.timeout_sec or DEFAULT_VERIFY_TIMEOUT,
        build_timeout_s=recipe.timeouts.build or environment.build_timeout_sec,
        compose=compose,
        agent_tools={k: v for k, v in (("mcp_servers", [m.model_dump() for m in environment.mcp_servers]),
                                       ("skills_dir", environment.skills_dir)) if v},
        data={
            "dir": task_dir,
            "tests": [f"{task_dir}/tests"],
            "solution": f"{task_dir}/solution",
            "verifier_env": strings(config.verifier.env),
            "solution_env": strings(config.solution.env),
            "verifier_user": str(config.verifier.user) if config.verifier.user is not None else None,
            "networks": phases if declared else {},
            "allowed_hosts": hosts,
            "healthcheck": environment.healthcheck.model_dump() if environment.healthcheck else None,
            "environment_mode": mode,
            "verifier": verifier,  # what a separate verifier runs in (grading_spec); None when shared
            "artifacts": artifact_paths(task_dir, config.artifacts, compose),
            "collect": hooks,
            "steps": steps,
            "multi_step_reward_strategy": config.multi_step_reward_strategy or "mean",
        },
    )


def step_data(recipe: Recipe, task_dir: Path, config: TaskConfig, step: Step, compose: ComposeSpec | None) -> dict[str, Any]:
    """One [[steps]] entry with the task's [agent] and [verifier] as its defaults, as in Harbor; its collection
    pass runs the task's hooks and its own, and collects the task's artifacts and its own."""
    step_dir = task_dir / "steps" / step.name
    unsupported = [field for field, used in (("verifier.environment", step.verifier.environment),
                                             ("verifier.environment_mode = \"separate\"", step.verifier.environment_mode == "separate"))
                   if used]
    if unsupported:
        raise UserError(f"{task_dir / 'task.toml'}: step '{step.name}' sets {', '.join(unsupported)}, which "
                        f"agentcompass does not support for a step yet; leave the task out")
    if not (step_dir / "instruction.md").is_file():
        raise UserError(f"{task_dir / 'task.toml'}: step '{step.name}' needs steps/{step.name}/instruction.md")
    user = step.agent.user if step.agent.user is not None else config.agent.user
    verifier_user = step.verifier.user if step.verifier.user is not None else config.verifier.user
    return {
        "name": step.name,
        "dir": str(step_dir),
        "instruction": render_instruction(recipe, instruction=(step_dir / "instruction.md").read_text(encoding="utf-8"),
                                          task_id=task_dir.name),
        "agent_user": str(user) if user is not None else None,
        "agent_timeout_s": step.agent.timeout_sec,
        "verify_timeout_s": step.verifier.timeout_sec,
        "verifier_user": str(verifier_user) if verifier_user is not None else None,
        "verifier_env": {**strings(config.verifier.env), **strings(step.verifier.env)},
        "min_reward": step.min_reward,
        "healthcheck": step.healthcheck.model_dump() if step.healthcheck else None,
        "artifacts": artifact_paths(task_dir, [*config.artifacts, *step.artifacts], compose),
        "collect": collect_hooks(str(task_dir), config, compose, step.verifier.collect),
    }
