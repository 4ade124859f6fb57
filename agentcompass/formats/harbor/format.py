"""Harbor task format (Terminal-Bench 2, Harbor's registry).

A dataset is a directory of task dirs, each with task.toml, instruction.md,
environment/ (a Dockerfile, or [environment].docker_image), tests/test.sh and
solution/solve.sh. The verifier writes /logs/verifier/reward.txt or reward.json. It runs where the
agent worked ([verifier] environment_mode = "shared", the default) or, "separate", in a new
sandbox of its own image that gets only /logs/artifacts and the task's declared artifacts.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import tomli  # the compiled twin of tomllib: several times faster over a dataset of thousands of task.toml
from pydantic import ValidationError
from agentcompass.core.errors import InfraError, UserError, VerifierError
from agentcompass.formats.base import SelectionParams, render_instruction, run_solution, select_tasks
from agentcompass.formats.harbor.collect import ARTIFACTS_DIR, MAIN, collect_all
from agentcompass.formats.harbor.dataset import manifest_task_dirs
from agentcompass.formats.harbor.fields import is_free_form
from agentcompass.formats.harbor.schema import Artifact, CollectHook, Environment, Step, TaskConfig, unknown_fields
from agentcompass.formats.harbor.verifier import environment_mode, separate_verifier, verifier_settings
from agentcompass.formats.integrity import clear_verifier_inputs, tampering_note
from agentcompass.formats.sources import dataset_root
from agentcompass.formats.terminal_bench.compose import COMPOSE_FILES, compose_services
from agentcompass.core.sandbox import ComposeSpec
from agentcompass.core.results import read_if_present
from agentcompass.core.schema import Recipe
from agentcompass.core.task import AgentOutcome, Grade, Task

if TYPE_CHECKING:
    from agentcompass.core.sandbox import Sandbox, SandboxSpec
    from agentcompass.core.context import TrialContext

DEFAULT_AGENT_TIMEOUT = None  # Harbor 0.26: no agent timeout unless the task, recipe or harness sets one
DEFAULT_VERIFY_TIMEOUT = 600.0  # Harbor 0.26's VerifierConfig.timeout_sec
VERIFIER_DIR = "/logs/verifier"
REWARD_FILES = (f"{VERIFIER_DIR}/reward.txt", f"{VERIFIER_DIR}/reward.json")
TESTS_DIR = "/tests"
WARNED: set[str] = set()  # the unknown-field warnings this process printed
SETUP_SCRIPT = ".setup.sh"  # in environment/workspace: what the Dockerfile RUNs, for hosts without a build


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


class HarborFormat:
    Params = SelectionParams

    def __init__(self, recipe: Recipe) -> None:
        self.recipe = recipe

    # -- loading -------------------------------------------------------------------------
    def dataset_dir(self) -> Path:
        return dataset_root(self.recipe)

    def load(self) -> list[Task]:
        root = self.dataset_dir()
        manifest = self.recipe.source.get("manifest")  # Harbor's dataset.toml: its [[tasks]], in its order
        single = None if manifest else read_config_if_present(root)  # the root itself is one task
        if manifest:
            configs = {d: read_config(d) for d in manifest_task_dirs(str(root), str(manifest))}
        elif single is not None:
            configs = {str(root): single}
        else:
            configs = {d: c for d in task_dirs(root) if (c := read_config_if_present(d)) is not None}
        if not configs:
            raise UserError(f"benchmark '{self.recipe.name}': no Harbor tasks (dirs with task.toml) in {root}")
        warn_unknown(self.recipe.name, configs)
        return select_tasks([self.load_or_refuse(d, c) for d, c in configs.items()], self.recipe.params, self.recipe.name)

    def load_or_refuse(self, task_dir: str, config: TaskConfig) -> Task:
        """The task, or, where it asks for what agentcompass cannot do, a task refused alone: its trials
        record the reason and the dataset's other tasks run (the runner refuses a run of refused tasks only)."""
        try:
            return self.load_task(task_dir, config)
        except UserError as exc:
            return Task(id=os.path.basename(task_dir), instruction="", refusal=str(exc))

    def load_task(self, task_dir: Path | str, config: TaskConfig | None = None) -> Task:
        # Plain strings and one listing of environment/, not Path objects and a stat per file: a dataset
        # may hold thousands of tasks, all loaded before the first trial starts. (str() of a Path ends in no '/'.)
        task_dir = str(task_dir)
        config = config or read_config(task_dir)
        recipe = self.recipe
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
        steps = [self.step_data(Path(task_dir), config, step, compose) for step in config.steps or []]
        if environment.os != "linux":  # every provider here runs Linux sandboxes
            raise UserError(f"task '{task_id}' needs [environment] os = \"{environment.os}\", which no provider "
                            f"here can honour (they run Linux sandboxes); leave the task out")
        if environment.tpu is not None:
            raise UserError(f"task '{task_id}' asks for [environment.tpu] ({environment.tpu.type}, "
                            f"{environment.tpu.topology}), which no provider here can attach; leave the task out")
        rendered = render_instruction(recipe, instruction=instruction, task_id=task_id)
        mode = environment_mode(task_dir, config)
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

    def step_data(self, task_dir: Path, config: TaskConfig, step: Step, compose: ComposeSpec | None) -> dict[str, Any]:
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
            "instruction": render_instruction(self.recipe, instruction=(step_dir / "instruction.md").read_text(encoding="utf-8"),
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

    # -- trial phases --------------------------------------------------------------------
    def stage(self, task: Task, sandbox: "Sandbox", trial: "TrialContext") -> None:
        """Where no image was built, do what the Dockerfile does (seed the workdir, run setup); then wait
        for the healthcheck and put the sandbox on the agent's network."""
        seed_workdir(task, sandbox, trial)
        open_logs(task, sandbox)
        await_healthy(task.data["healthcheck"], sandbox, trial)
        enter_phase(task, sandbox, "agent")

    def run_agent(self, harness: Any, task: Task, sandbox: "Sandbox", model: Any, trial: "TrialContext") -> AgentOutcome:
        """Each [[steps]] entry in order in the one sandbox, each graded at once; stop below its min_reward."""
        if not task.data["steps"]:
            return harness.run(task, as_user(sandbox, task.agent_user), model, trial, self)
        outcome, grades = AgentOutcome(), []
        for step in task.data["steps"]:
            step_task = self.step_task(task, step)
            await_healthy(step["healthcheck"], sandbox, trial)
            enter_phase(task, sandbox, "agent")
            done = harness.run(step_task, as_user(sandbox, step_task.agent_user), model, trial, self)
            outcome = done.model_copy(update={"usage": outcome.usage + done.usage})
            grade = self.grade(step_task, sandbox, trial, done)
            grades.append({"name": step["name"], "reward": grade.reward, "rewards": grade.rewards})
            if not reaches(grade.rewards, step["min_reward"]):
                break
        return outcome.model_copy(update={"steps": grades})

    def step_task(self, task: Task, step: dict[str, Any]) -> Task:
        """The task as one step sees it: the step's instruction, user, timeouts, tests over the task's, solution."""
        return replace(
            task, instruction=step["instruction"], agent_user=step["agent_user"],
            agent_timeout_s=self.recipe.timeouts.agent or step["agent_timeout_s"] or task.agent_timeout_s,
            verify_timeout_s=self.recipe.timeouts.verify or step["verify_timeout_s"] or task.verify_timeout_s,
            data={**task.data, "steps": [], "step": step["name"], "verifier_user": step["verifier_user"],
                  "artifacts": step["artifacts"], "collect": step["collect"],
                  "verifier_env": step["verifier_env"], "tests": [*task.data["tests"], str(Path(step["dir"]) / "tests")],
                  "solution": str(Path(step["dir"]) / "solution")},
        )

    def solve(self, task: Task, sandbox: "Sandbox", trial: "TrialContext") -> AgentOutcome:
        solution = Path(task.data["solution"])
        if not os.path.isfile(os.path.join(task.data["solution"], "solve.sh")):
            raise VerifierError(f"task '{task.id}' has no {solution.relative_to(task.data['dir'])}/solve.sh for the oracle")
        sandbox.upload(solution, "/solution")
        return run_solution(task, sandbox, trial, "bash /solution/solve.sh", task.data["solution_env"])

    # -- a separate verifier environment ([verifier] environment_mode = "separate") --------
    def grading_spec(self, task: Task, spec: "SandboxSpec") -> "SandboxSpec | None":
        """Harbor's separate verifier: [verifier.environment]'s image, else one built from tests/, with
        [verifier.environment]'s resources (the task's [environment] when absent); None when shared."""
        if task.data["environment_mode"] != "separate":
            return None
        verifier = task.data["verifier"]
        env = verifier_settings(verifier)
        network = task.data["networks"].get("verifier") or env.baseline_network()
        user = task.data["verifier_user"]
        context = verifier["build_context"]
        return replace(
            spec, name=f"{spec.name[:114]}-grade", labels={**spec.labels, "phase": "grade"},
            image=verifier["image"], build_context=Path(context) if context else None,
            workdir=self.recipe.workdir or env.workdir or spec.workdir,
            env={**self.recipe.env, **strings(env.env)},
            cpus=self.recipe.resources.cpus or env.cpus, memory_mb=self.recipe.resources.memory_mb or env.memory_mb,
            storage_mb=env.storage_mb, gpus=env.gpus or 0, allow_internet=network == "public",
            network_modes=(network,) if task.data["networks"] else (), users={"[verifier] user": user} if user else {},
            compose=None,  # the verifier runs alone, as in Harbor: the sidecars ended with the agent's sandbox
        )

    def collect(self, task: Task, sandbox: "Sandbox", trial: "TrialContext", outcome: AgentOutcome) -> AgentOutcome:
        """Once the agent is done: the [[verifier.collect]] hooks, then what the verifier gets from the agent's
        sandbox (and its sidecars): /logs/artifacts and the task's artifacts, each under the trial's artifacts/
        at its own path (harbor_collect.py)."""
        collected = collect_all(task, sandbox, trial)
        return outcome.model_copy(update={"collected": collected}) if collected else outcome

    def stage_grading(self, task: Task, sandbox: "Sandbox", trial: "TrialContext") -> None:
        """The artifacts, over the task's starting state: a verifier image is the task's or built FROM it, so
        where no image is built (a task run on the host) the workdir is seeded as the agent's was."""
        seed_workdir(task, sandbox, trial)
        open_logs(task, sandbox)
        for path in (ARTIFACTS_DIR, *(a["source"] for a in task.data["artifacts"])):
            local = trial.dir / "artifacts" / path.lstrip("/")
            if local.exists():
                sandbox.upload(local, path)

    def grade(self, task: Task, sandbox: "Sandbox", trial: "TrialContext", outcome: AgentOutcome) -> Grade:
        mode = task.data["environment_mode"]
        if mode == "shared" and not task.data["steps"]:  # (a multi-step task's steps collected as each was graded)
            outcome = self.collect(task, sandbox, trial, outcome)  # what the agent left, before the verifier touches it
        if task.data["steps"]:
            return combine_steps(outcome.steps, task.data["multi_step_reward_strategy"], len(task.data["steps"]))
        enter_phase(task, sandbox, "verifier")
        # A separate verifier's own image holds /tests itself, as in Harbor; the task's image (the fallback) and
        # a sandbox without an image built (a task run on the host) get them uploaded as in shared mode.
        bundled = mode == "separate" and task.data["verifier"]["bundled_tests"]
        upload = not bundled or not getattr(sandbox, "has_task_image", False)
        where = f"steps/{task.data['step']}/" if task.data.get("step") else ""
        # Nothing the agent left is read as a verdict: the reward files go and /tests is uploaded afresh.
        found = clear_verifier_inputs(sandbox, dirs=(TESTS_DIR,) if upload else (), files=REWARD_FILES,
                                      make=(VERIFIER_DIR, "/logs/agent"))
        trial.flag_tampering(tampering_note(found, (TESTS_DIR,) if where and upload else ()))  # not an earlier step's tests
        if upload:
            for tests in task.data["tests"]:  # a step's tests over the task's
                if os.path.isdir(tests):
                    sandbox.upload(Path(tests), TESTS_DIR)
        clear = f"rm -rf {VERIFIER_DIR}/* && " if where else ""  # a step's grade is not the step before's
        result = sandbox.exec(
            f"{clear}bash {TESTS_DIR}/test.sh",
            env=task.data["verifier_env"], timeout=task.verify_timeout_s, user=task.data["verifier_user"],
        )
        output = result.stdout + result.stderr
        trial.log(f"{where}verifier.log", output)
        if result.timed_out:
            raise VerifierError(f"verifier timed out after {task.verify_timeout_s:.0f}s")
        rewards = self.read_rewards(sandbox, trial.dir.joinpath(where, "verifier"), result.exit_code,
                                    "see verifier.log" if output else "it printed nothing")
        if where:  # the next step's check must not take this step's reward for the agent's
            sandbox.exec(f"rm -f -- {' '.join(REWARD_FILES)}", user="root", timeout=60)
        reward = rewards.get("reward", sum(rewards.values()) / len(rewards))
        details = {"test_exit_code": result.exit_code, "environment_mode": mode}
        if outcome.collected:
            details["collected"] = outcome.collected
        return Grade(passed=reward >= 1.0, reward=reward, rewards=rewards, details=details)

    def read_rewards(self, sandbox: "Sandbox", local: Path, exit_code: int, hint: str = "see verifier.log") -> dict[str, float]:
        try:
            sandbox.download(VERIFIER_DIR, local)
        except FileNotFoundError:
            pass
        try:  # reward.json first, as Harbor reads it (verifier.py)
            data = read_if_present(os.path.join(local, "reward.json"))
            if data is not None:
                if not data.strip():
                    raise ValueError("reward.json is empty")
                named = json.loads(data)
                if not isinstance(named, dict) or not named:
                    raise ValueError("reward.json must be a non-empty object of named rewards")
                return {str(k): finite(v) for k, v in named.items()}
            text = read_if_present(os.path.join(local, "reward.txt"))
            if text is not None:
                if not text.strip():
                    raise ValueError("reward.txt is empty")
                return {"reward": finite(float(text.decode().strip()))}
        except ValueError as exc:
            raise VerifierError(f"unreadable reward file: {exc}") from exc
        raise VerifierError(
            f"test.sh (exit {exit_code}) wrote neither {VERIFIER_DIR}/reward.txt nor reward.json; {hint}"
        )


# -- phases shared by single- and multi-step tasks ---------------------------------------------
def seed_workdir(task: Task, sandbox: "Sandbox", trial: "TrialContext") -> None:
    """Where no image was built, do what the Dockerfile does: seed the workdir from environment/workspace, run
    its setup script."""
    if getattr(sandbox, "has_task_image", False) or task.seed_dir is None:
        return
    sandbox.upload(task.seed_dir, task.workdir)
    if (task.seed_dir / SETUP_SCRIPT).is_file():
        result = sandbox.exec(f"bash {SETUP_SCRIPT} && rm -f {SETUP_SCRIPT}", timeout=task.build_timeout_s or 600)
        trial.write("setup.log", result.stdout + result.stderr)
        if not result.ok:
            raise InfraError(f"task setup failed (exit {result.exit_code}); see setup.log")


def as_user(sandbox: "Sandbox", user: str | None) -> "Sandbox":
    return RunAs(sandbox, user) if user else sandbox


class RunAs:
    """The sandbox as the agent sees it: commands run as the task's [agent] user unless told otherwise."""

    def __init__(self, inner: "Sandbox", user: str) -> None:
        self.inner, self.user = inner, user

    def exec(self, cmd: str, **kwargs: Any) -> Any:
        kwargs.setdefault("user", self.user)
        return self.inner.exec(cmd, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def open_logs(task: Task, sandbox: "Sandbox") -> None:
    """Tasks with their own users write /logs too: the dirs are made by root and writable by all, as in Harbor."""
    if task.users:
        dirs = f"/logs/agent {VERIFIER_DIR} {ARTIFACTS_DIR}"
        result = sandbox.exec(f"mkdir -p {dirs} && chmod 777 {dirs}", user="root", timeout=60)
        if not result.ok:
            raise InfraError(f"cannot make /logs writable for the task's users: {result.stderr.strip()[-200:]}")


def enter_phase(task: Task, sandbox: "Sandbox", phase: str) -> None:
    """The phase's network_mode, where the task's phases differ ([agent], [verifier] over [environment])
    or it has an allowlist (whose hosts are the phase's)."""
    mode = task.data["networks"].get(phase)
    if mode and (len(task.network_modes) > 1 or "allowlist" in task.network_modes):
        hosts = task.data["allowed_hosts"].get(phase, ())
        sandbox.set_network(mode, hosts)  # type: ignore[attr-defined]  # the provider's check made sure it can


def await_healthy(check: dict[str, Any] | None, sandbox: "Sandbox", trial: "TrialContext") -> None:
    """Docker HEALTHCHECK semantics before the agent starts: `retries` consecutive failures after the
    start period end the trial as an infra error (the environment never became ready)."""
    if not check:
        return
    started, failures = time.monotonic(), 0
    while True:
        result = sandbox.exec(check["command"], timeout=check["timeout_sec"])
        trial.append("healthcheck.log", f"$ {check['command']}\nexit {result.exit_code}\n{result.stdout}{result.stderr}")
        if result.ok:
            return
        starting = time.monotonic() - started < check["start_period_sec"]
        failures = 0 if starting else failures + 1
        if failures >= check["retries"]:
            raise InfraError(f"healthcheck failed {failures} times in a row (exit {result.exit_code}); see healthcheck.log")
        if trial.stopping.wait(check["start_interval_sec"] if starting else check["interval_sec"]):
            raise InfraError("interrupted")


def finite(value: Any) -> float:
    """A reward as Harbor accepts it: a real, finite number (not a string, NaN or infinity)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"reward {value!r} is not a finite number")
    return float(value)


def reaches(rewards: dict[str, float], minimum: float | dict[str, float] | None) -> bool:
    """A step's min_reward: one threshold for its reward, or one per named reward (absent counts 0)."""
    if minimum is None:
        return True
    if isinstance(minimum, dict):
        return all(rewards.get(key, 0.0) >= value for key, value in minimum.items())
    return rewards.get("reward", sum(rewards.values()) / max(len(rewards), 1)) >= minimum


def combine_steps(steps: list[dict[str, Any]], strategy: str, total: int) -> Grade:
    """The trial's reward from its steps': their mean (a step never reached counts 0), or the final step's."""
    rewards = {f"{s['name']}/{key}": value for s in steps for key, value in s["rewards"].items()}
    if not steps:  # the agent failed before the first step was graded
        reward = 0.0
    elif strategy == "final":
        reward = steps[-1]["reward"]  # the last step run: a stop below min_reward ends the task there
    else:
        reward = sum(s["reward"] for s in steps) / total
    return Grade(passed=reward >= 1.0, reward=reward, rewards={"reward": reward, **rewards},
                 details={"steps": steps, "steps_run": len(steps), "steps_total": total})
