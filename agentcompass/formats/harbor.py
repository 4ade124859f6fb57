"""Harbor task format (Terminal-Bench 2, Harbor's registry).

A dataset is a directory of task dirs, each with task.toml, instruction.md,
environment/ (a Dockerfile, or [environment].docker_image), tests/test.sh and
solution/solve.sh. The verifier writes /logs/verifier/reward.txt or reward.json. It runs where the
agent worked ([verifier] environment_mode = "shared", the default) or, "separate", in a new
sandbox of its own image that gets only /logs/artifacts and the task's declared artifacts.
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentcompass.errors import InfraError, UserError, VerifierError
from agentcompass.formats.base import SelectionParams, render_instruction, run_solution, select_tasks
from agentcompass.formats.sources import dataset_root
from agentcompass.schema import Recipe
from agentcompass.task import AgentOutcome, Grade, Task

if TYPE_CHECKING:
    from agentcompass.sandbox import Sandbox, SandboxSpec
    from agentcompass.trial import TrialContext

DEFAULT_AGENT_TIMEOUT = 600.0
DEFAULT_VERIFY_TIMEOUT = 300.0
VERIFIER_DIR = "/logs/verifier"
ARTIFACTS_DIR = "/logs/artifacts"  # copied to a separate verifier, as Harbor does
SETUP_SCRIPT = ".setup.sh"  # in environment/workspace: what the Dockerfile RUNs, for hosts without a build


def parse_memory_mb(value: Any) -> int | None:
    """task.toml gives memory_mb = 2048 or memory = "2G"."""
    if value is None or isinstance(value, int):
        return value
    text = str(value).strip().upper().removesuffix("B")
    units = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(float(text))


def verifier_environment_mode(task_dir: Path, meta: dict[str, Any]) -> str:
    """Harbor's rule: [verifier] environment_mode, "separate" implied by a [verifier.environment] table."""
    verifier = meta.get("verifier", {})
    mode = verifier.get("environment_mode") or ("separate" if "environment" in verifier else "shared")
    if mode not in ("shared", "separate"):
        raise UserError(f"{task_dir / 'task.toml'}: [verifier] environment_mode must be shared or separate, got {mode!r}")
    if mode == "shared" and "environment" in verifier:
        raise UserError(f"{task_dir / 'task.toml'}: [verifier.environment] needs environment_mode = \"separate\"")
    image = (verifier.get("environment") or {}).get("docker_image")
    if mode == "separate" and not image and not (task_dir / "tests" / "Dockerfile").is_file():
        raise UserError(f"{task_dir / 'task.toml'}: a separate verifier needs [verifier.environment] docker_image "
                        f"or tests/Dockerfile (its image provides /tests/test.sh)")
    return str(mode)


def artifact_paths(task_dir: Path, artifacts: list[Any]) -> list[str]:
    """task.toml's top-level artifacts: absolute paths, or tables with a `source` path."""
    paths = [a.get("source") if isinstance(a, dict) else a for a in artifacts]
    bad = [p for p in paths if not isinstance(p, str) or not p.startswith("/")]
    if bad:
        raise UserError(f"{task_dir / 'task.toml'}: artifacts must be absolute paths, got {bad[0]!r}")
    return paths


class HarborFormat:
    Params = SelectionParams

    def __init__(self, recipe: Recipe) -> None:
        self.recipe = recipe

    # -- loading -------------------------------------------------------------------------
    def dataset_dir(self) -> Path:
        return dataset_root(self.recipe)

    def load(self) -> list[Task]:
        root = self.dataset_dir()
        if (root / "task.toml").is_file():
            dirs = [root]
        else:
            dirs = sorted(p.parent for p in root.glob("*/task.toml"))
        if not dirs:
            raise UserError(f"benchmark '{self.recipe.name}': no Harbor tasks (dirs with task.toml) in {root}")
        return select_tasks([self.load_task(d) for d in dirs], self.recipe.params)

    def load_task(self, task_dir: Path) -> Task:
        try:
            meta = tomllib.loads((task_dir / "task.toml").read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise UserError(f"{task_dir / 'task.toml'}: {exc}") from exc
        recipe = self.recipe
        environment = meta.get("environment", {})
        image = environment.get("docker_image") or (recipe.image.format(task_id=task_dir.name) if recipe.image else None)
        dockerfile = task_dir / "environment" / "Dockerfile"
        seed = task_dir / "environment" / "workspace"
        instruction_path = task_dir / "instruction.md"
        instruction = instruction_path.read_text(encoding="utf-8") if instruction_path.is_file() else ""
        return Task(
            id=task_dir.name,
            instruction=render_instruction(recipe, instruction=instruction, task_id=task_dir.name),
            workdir=recipe.workdir or environment.get("workdir") or "/app",
            image=image,
            build_context=dockerfile.parent if dockerfile.is_file() and not image else None,
            build_args=dict(recipe.build_args),
            runs_on_host=recipe.runs_on_host,
            seed_dir=seed if seed.is_dir() else None,
            env={**recipe.env, **{k: str(v) for k, v in environment.get("env", {}).items()}},
            cpus=recipe.resources.cpus or environment.get("cpus"),
            memory_mb=recipe.resources.memory_mb or parse_memory_mb(environment.get("memory_mb", environment.get("memory"))),
            allow_internet=recipe.allow_internet if recipe.allow_internet is not None else environment.get("allow_internet", True),
            agent_timeout_s=recipe.timeouts.agent or meta.get("agent", {}).get("timeout_sec") or DEFAULT_AGENT_TIMEOUT,
            verify_timeout_s=recipe.timeouts.verify or meta.get("verifier", {}).get("timeout_sec") or DEFAULT_VERIFY_TIMEOUT,
            build_timeout_s=recipe.timeouts.build or environment.get("build_timeout_sec"),
            data={
                "dir": str(task_dir),
                "verifier_env": {k: str(v) for k, v in meta.get("verifier", {}).get("env", {}).items()},
                "solution_env": {k: str(v) for k, v in meta.get("solution", {}).get("env", {}).items()},
                "environment_mode": verifier_environment_mode(task_dir, meta),
                # a separate verifier without its own table copies [environment]; its image comes from tests/
                "verifier_environment": meta.get("verifier", {}).get("environment")
                or {k: v for k, v in environment.items() if k != "docker_image"},
                "artifacts": artifact_paths(task_dir, meta.get("artifacts") or []),
            },
        )

    # -- trial phases --------------------------------------------------------------------
    def stage(self, task: Task, sandbox: "Sandbox", trial: "TrialContext") -> None:
        """Where no image was built, do what the Dockerfile does: seed the workdir, run setup."""
        if getattr(sandbox, "has_task_image", False) or task.seed_dir is None:
            return
        sandbox.upload(task.seed_dir, task.workdir)
        if (task.seed_dir / SETUP_SCRIPT).is_file():
            result = sandbox.exec(f"bash {SETUP_SCRIPT} && rm -f {SETUP_SCRIPT}", timeout=task.build_timeout_s or 600)
            trial.write("setup.log", result.stdout + result.stderr)
            if not result.ok:
                raise InfraError(f"task setup failed (exit {result.exit_code}); see setup.log")

    def solve(self, task: Task, sandbox: "Sandbox", trial: "TrialContext") -> AgentOutcome:
        solution = Path(task.data["dir"]) / "solution"
        if not (solution / "solve.sh").is_file():
            raise VerifierError(f"task '{task.id}' has no solution/solve.sh for the oracle")
        sandbox.upload(solution, "/solution")
        return run_solution(task, sandbox, trial, "bash /solution/solve.sh", task.data["solution_env"])

    # -- a separate verifier environment ([verifier] environment_mode = "separate") --------
    def grading_spec(self, task: Task, spec: "SandboxSpec") -> "SandboxSpec | None":
        """Harbor's separate verifier: [verifier.environment]'s image, else one built from tests/, with
        [verifier.environment]'s resources (the task's [environment] when absent); None when shared."""
        if task.data["environment_mode"] != "separate":
            return None
        env = task.data["verifier_environment"]
        tests = Path(task.data["dir"]) / "tests"
        network = env.get("network_mode")
        return replace(
            spec, name=f"{spec.name[:114]}-grade", labels={**spec.labels, "phase": "grade"},
            image=env.get("docker_image"), build_context=None if env.get("docker_image") else tests,
            cpus=self.recipe.resources.cpus or env.get("cpus"),
            memory_mb=self.recipe.resources.memory_mb or parse_memory_mb(env.get("memory_mb", env.get("memory"))),
            allow_internet=network != "no-network" if network else env.get("allow_internet", True),
        )

    def collect(self, task: Task, sandbox: "Sandbox", trial: "TrialContext", outcome: AgentOutcome) -> AgentOutcome:
        """What the separate verifier gets from the agent's sandbox: /logs/artifacts and the task's artifacts."""
        for path in (ARTIFACTS_DIR, *task.data["artifacts"]):
            try:
                sandbox.download(path, trial.dir / "artifacts" / path.lstrip("/"))
            except FileNotFoundError:
                continue
        return outcome

    def stage_grading(self, task: Task, sandbox: "Sandbox", trial: "TrialContext") -> None:
        for path in (ARTIFACTS_DIR, *task.data["artifacts"]):
            local = trial.dir / "artifacts" / path.lstrip("/")
            if local.exists():
                sandbox.upload(local, path)

    def grade(self, task: Task, sandbox: "Sandbox", trial: "TrialContext", outcome: AgentOutcome) -> Grade:
        mode = task.data["environment_mode"]
        # A separate verifier's image holds /tests itself, as in Harbor; where no image is built
        # (a task run on the host) the tests are uploaded as in shared mode.
        if mode == "shared" or not getattr(sandbox, "has_task_image", False):
            sandbox.upload(Path(task.data["dir"]) / "tests", "/tests")
        result = sandbox.exec(
            f"mkdir -p {VERIFIER_DIR} /logs/agent && bash /tests/test.sh",
            env=task.data["verifier_env"],
            timeout=task.verify_timeout_s,
        )
        trial.write("verifier.log", result.stdout + result.stderr)
        if result.timed_out:
            raise VerifierError(f"verifier timed out after {task.verify_timeout_s:.0f}s")
        rewards = self.read_rewards(sandbox, trial, result.exit_code)
        reward = rewards.get("reward", sum(rewards.values()) / len(rewards))
        return Grade(passed=reward >= 1.0, reward=reward, rewards=rewards,
                     details={"test_exit_code": result.exit_code, "environment_mode": mode})

    def read_rewards(self, sandbox: "Sandbox", trial: "TrialContext", exit_code: int) -> dict[str, float]:
        local = trial.dir / "verifier"
        try:
            sandbox.download(VERIFIER_DIR, local)
        except FileNotFoundError:
            pass
        text_file, json_file = local / "reward.txt", local / "reward.json"
        try:
            if text_file.is_file():
                return {"reward": float(text_file.read_text().strip())}
            if json_file.is_file():
                data = json.loads(json_file.read_text())
                if not isinstance(data, dict) or not data:
                    raise ValueError("reward.json must be a non-empty object of named rewards")
                return {str(k): float(v) for k, v in data.items()}
        except ValueError as exc:
            raise VerifierError(f"unreadable reward file: {exc}") from exc
        raise VerifierError(
            f"test.sh (exit {exit_code}) wrote neither {VERIFIER_DIR}/reward.txt nor reward.json; see verifier.log"
        )
