"""CooperBench task format: features of one pull request, implemented alone or by two cooperating agents.

The dataset (a local dir, or the CooperBench repository's `dataset/` by git) holds `<repo>_task/task<id>/`
with a Dockerfile, runner.sh and `feature<N>/{feature.md, feature.patch, tests.patch}`. A trial is one unit
of the benchmark param `setting`:
- single: one agent, one feature (task id `<repo>_task/task<id>/f<N>`);
- solo: one agent, both features of a pair (`.../f<A>+f<B>`);
- coop: two agents at once, one feature each, in two sandboxes of the task image, with a message channel
  and a shared git remote (cooperbench_coop); their patches are merged and both features' tests run.
Pairs are every pair of a task's features, or a subset file's (`subset: lite`), or `sample_ids`. Grading
(cooperbench_grade) runs in a fresh sandbox of the task image, as CooperBench's evaluator does.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from itertools import combinations
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from agentcompass.core.errors import InfraError, TrialError, UserError
from agentcompass.formats.cooperbench import grade as grading
from agentcompass.formats.base import SelectionParams, recipe_limits, select_tasks
from agentcompass.formats.integrity import clear_verifier_inputs
from agentcompass.formats.cooperbench.coop import AGENTS, MessageRelay, coop_compose, install_tools, partner_spec
from agentcompass.formats.sources import dataset_root
from agentcompass.core.schema import Recipe
from agentcompass.core.task import AgentOutcome, Grade, Task, Usage

if TYPE_CHECKING:
    from agentcompass.core.results import TrialResult
    from agentcompass.core.sandbox import Sandbox, SandboxSpec
    from agentcompass.core.context import TrialContext

SETTINGS = ("single", "solo", "coop")
DEFAULT_AGENT_TIMEOUT = 3600.0
DEFAULT_VERIFY_TIMEOUT = 1800.0
START_REF = "refs/agentcompass/start"
AGENTS_FILE = "agents.json"  # coop: each agent's exit status, usage and patch, written by run_agent
SOLO_TEMPLATE = "Implement both of the following features.\n\n## Feature {a}\n\n{text_a}\n\n## Feature {b}\n\n{text_b}\n"
COOP_TEMPLATE = """{feature}

## Working with your colleague

You are {agent}; your colleague {other} implements another feature of the same repository at the same time,
in a copy of their own. After you both finish, your two patches are merged with `git merge` and the tests of
both features run on the merged code: plan together so that the patches merge cleanly.
- `send_message TEXT` (or `send_message <<'MSG'` ... `MSG`) sends your colleague a message;
  `receive_messages` prints the messages they sent you.
- The git remote `team` is shared: `git push team HEAD:{agent}` publishes your work, `git fetch team` and
  `git diff HEAD...team/{other}` show theirs. Do not merge, pull or rebase their branch into yours.
"""


class CooperbenchParams(SelectionParams):
    setting: Literal["single", "solo", "coop"] = "coop"
    subset: str | None = None  # a subset name (dataset's subsets/<name>.json) or a file: its tasks and pairs
    build: bool = False  # build each task's Dockerfile instead of running the published image


class CooperbenchFormat:
    Params = CooperbenchParams
    # Files of the attempt's folder its grade reads (coop: the second agent's patch): a regrade copies them over.
    kept_files = (AGENTS_FILE,)

    def __init__(self, recipe: Recipe) -> None:
        self.recipe = recipe
        self.setting = str(recipe.params.get("setting") or "coop")
        if self.setting not in SETTINGS:
            raise UserError(f"benchmark param 'setting' must be one of {', '.join(SETTINGS)}, got {self.setting!r}")

    # -- loading -------------------------------------------------------------------------
    def load(self) -> list[Task]:
        root = dataset_root(self.recipe)
        task_dirs = sorted(p for p in root.glob("*/task*") if p.is_dir() and features_of(p))
        if not task_dirs:
            raise UserError(f"benchmark '{self.recipe.name}': no CooperBench tasks (<repo>/task<id>/feature<N>/) in {root}")
        wanted = self.subset_pairs(root)
        tasks = []
        for task_dir in task_dirs:
            key = (task_dir.parent.name, task_number(task_dir))
            if wanted is not None and key not in wanted:
                continue
            pairs = wanted[key] if wanted is not None else list(combinations(features_of(task_dir), 2))
            for unit in self.units(pairs):
                tasks.append(self.make_task(task_dir, unit))
        return select_tasks(tasks, self.recipe.params, self.recipe.name)

    def units(self, pairs: list[tuple[int, int]]) -> list[tuple[int, ...]]:
        """single: each feature of the pairs once; solo and coop: the pairs."""
        if self.setting != "single":
            return [tuple(p) for p in pairs]
        return [(f,) for f in sorted({f for pair in pairs for f in pair})]

    def subset_pairs(self, root: Path) -> dict[tuple[str, int], list[tuple[int, int]]] | None:
        """The subset file's pairs by (repo dir, task number); None without a subset (every pair)."""
        name = self.recipe.params.get("subset") or self.recipe.source.get("subset")
        if not name:
            return None
        path = Path(str(name)).expanduser()
        if not path.is_file():
            path = root / "subsets" / f"{name}.json"
        if not path.is_file():
            known = sorted(p.stem for p in (root / "subsets").glob("*.json"))
            raise UserError(f"benchmark param 'subset' {name!r} is neither a file nor a subset of the dataset "
                            f"(known: {', '.join(known) or 'none'}); pass a name from subsets/ or a JSON file")
        try:
            data = json.loads(path.read_text())
            return {(t["repo"], int(t["task_id"])): [(int(a), int(b)) for a, b in t["pairs"]] for t in data["tasks"]}
        except (ValueError, KeyError, TypeError) as exc:
            raise UserError(f"subset file {path} is not CooperBench's shape "
                            f"({{tasks: [{{repo, task_id, pairs}}]}}): {exc}") from exc

    def make_task(self, task_dir: Path, features: tuple[int, ...]) -> Task:
        recipe = self.recipe
        repo, number = task_dir.parent.name, task_number(task_dir)
        build = bool(recipe.params.get("build")) or not recipe.image
        image = None if build else recipe.image.format(**image_fields(repo, number))  # type: ignore[union-attr]
        context = task_dir if build else None
        texts = {f: (task_dir / f"feature{f}" / "feature.md").read_text(encoding="utf-8") for f in features}
        if len(features) == 1:
            instruction = texts[features[0]]
        elif self.setting == "solo":
            a, b = features
            instruction = SOLO_TEMPLATE.format(a=a, b=b, text_a=texts[a], text_b=texts[b])
        else:
            instruction = coop_instruction(texts[features[0]], AGENTS[0])
        task = Task(
            id=f"{repo}/task{number}/" + "+".join(f"f{f}" for f in features),
            instruction=instruction,
            workdir=recipe.workdir or grading.REPO_DIR,
            image=image,
            build_context=context,
            build_args=dict(recipe.build_args),
            **recipe_limits(recipe, DEFAULT_AGENT_TIMEOUT, DEFAULT_VERIFY_TIMEOUT),
            image_entrypoint=False,  # its ENTRYPOINT is runner.sh, which CooperBench's harness runs as a command
            data={"repo": repo, "task_number": number, "task_dir": str(task_dir), "features": list(features),
                  "setting": self.setting, "feature_texts": {str(f): t for f, t in texts.items()}},
        )
        if self.setting == "coop":
            task.compose = coop_compose(image, context, task.build_args)
        return task

    def check_env(self, provider: Any) -> None:
        """coop needs the agents' sandboxes on one private network with the git daemon: docker only, today."""
        name = getattr(provider, "name", "")
        if self.setting == "coop" and name != "docker":
            raise UserError(f"CooperBench's coop setting needs --env docker (a per-trial network with the git server); "
                            f"the {name} env cannot join two sandboxes; run setting single or solo there")

    # -- trial phases --------------------------------------------------------------------
    def stage(self, task: Task, sandbox: "Sandbox", trial: "TrialContext") -> None:
        result = sandbox.exec(
            f"mkdir -p {grading.PATCHES_DIR} && git config --global --add safe.directory '*' && "
            "git config --global user.email agent@agentcompass.local && git config --global user.name agent && "
            f"git update-ref {START_REF} HEAD", cwd=task.workdir, timeout=grading.GIT_TIMEOUT)
        if not result.ok:
            raise InfraError(f"no git repository at {task.workdir} in the sandbox: {result.stderr.strip()[-300:]}")

    def solve(self, task: Task, sandbox: "Sandbox", trial: "TrialContext") -> AgentOutcome:
        """The oracle: the gold feature.patch of each of the task's features; for two features the task's
        combined.patch (the whole pull request) where there is one, since two gold patches may overlap."""
        log = []
        task_dir = Path(task.data["task_dir"])
        golds = [task_dir / f"feature{f}" / "feature.patch" for f in task.data["features"]]
        if len(golds) > 1 and (task_dir / "combined.patch").is_file():
            golds = [task_dir / "combined.patch"]
        for gold in golds:
            remote = "/tmp/agentcompass-gold.patch"
            sandbox.upload(gold, remote)
            result = sandbox.exec(f"git apply {remote} || git apply --3way {remote}", cwd=task.workdir, timeout=600)
            log.append(f"$ git apply {gold.relative_to(task_dir)}\n{result.stdout}{result.stderr}")
            if not result.ok:
                trial.write("agent.log", "".join(log))
                return AgentOutcome(exit_status=f"exit {result.exit_code}", message=f"{gold.relative_to(task_dir)} does not apply")
        trial.write("agent.log", "".join(log))
        return AgentOutcome(exit_status="completed")

    def run_agent(self, harness: Any, task: Task, sandbox: "Sandbox", model: Any, trial: "TrialContext") -> AgentOutcome:
        """single and solo: the harness once. coop: two harness runs at once, each in its own sandbox."""
        if self.setting != "coop":
            return harness.run(task, sandbox, model, trial, self)
        opener = getattr(trial, "open_sandbox", None)
        if opener is None:
            raise InfraError("this trial cannot open a second sandbox for coop")
        partner = opener(partner_spec(sandbox.spec))  # type: ignore[attr-defined]  # the trial closes it (or keeps it)
        self.stage(task, partner, trial)
        boxes = {AGENTS[0]: sandbox, AGENTS[1]: partner}
        for index, (agent, box) in enumerate(boxes.items()):
            install_tools(box, trial, agent, task.workdir, first=index == 0)
        with MessageRelay(boxes, trial) as relay:
            with ThreadPoolExecutor(max_workers=2, thread_name_prefix="coop") as pool:
                futures = {agent: pool.submit(self.run_one, harness, task, box, model, trial, agent)
                           for agent, box in boxes.items()}
                outcomes = {agent: future.result() for agent, future in futures.items()}
        for agent, outcome in outcomes.items():
            if isinstance(outcome, TrialError) and outcome.category == "infra":
                raise outcome
        record = {agent: self.outcome_record(o) for agent, o in outcomes.items()}
        record[AGENTS[1]]["patch"] = tree_diff(partner, task.workdir)
        record["messages"] = relay.count
        trial.write(AGENTS_FILE, json.dumps(record, indent=2))
        first = outcomes[AGENTS[0]]
        usage = sum((usage_of(o) for o in outcomes.values()), Usage())
        if isinstance(first, TrialError):
            return AgentOutcome(exit_status=f"{first.category}_error", message=str(first), usage=usage)
        return first.model_copy(update={"usage": usage})

    def run_one(self, harness: Any, task: Task, sandbox: "Sandbox", model: Any, trial: "TrialContext",
                agent: str) -> AgentOutcome | TrialError:
        """One coop agent's run, in a trial dir of its own (agent1/, agent2/); an error is returned, not raised."""
        feature = task.data["features"][AGENTS.index(agent)]
        text = task.data["feature_texts"][str(feature)]
        own = replace(task, instruction=coop_instruction(text, agent),
                      data={**task.data, "features": [feature], "agent": agent})
        own_trial = replace(trial, dir=trial.dir / agent)
        own_trial.dir.mkdir(parents=True, exist_ok=True)
        try:
            return harness.run(own, sandbox, model, own_trial, self)  # type: ignore[no-any-return]
        except TrialError as exc:
            return exc

    @staticmethod
    def outcome_record(outcome: AgentOutcome | TrialError) -> dict[str, Any]:
        """What agents.json says of one agent's run."""
        status = f"{outcome.category}_error" if isinstance(outcome, TrialError) else outcome.exit_status
        message = str(outcome) if isinstance(outcome, TrialError) else outcome.message
        return {"exit_status": status, "message": message, "usage": usage_of(outcome).model_dump()}

    # -- grading -------------------------------------------------------------------------
    def grading_spec(self, task: Task, spec: "SandboxSpec") -> "SandboxSpec":
        """A fresh sandbox of the task image, alone (no coop network), as CooperBench's evaluator uses."""
        return dataclasses.replace(spec, name=f"{spec.name[:114]}-grade", compose=None,
                                   labels={**spec.labels, "phase": "grade"})

    def collect(self, task: Task, sandbox: "Sandbox", trial: "TrialContext", outcome: AgentOutcome) -> AgentOutcome:
        """The (first) agent's work: its tree against where it started, commits and new files included."""
        return outcome.model_copy(update={"submission": tree_diff(sandbox, task.workdir)})

    def stage_grading(self, task: Task, sandbox: "Sandbox", trial: "TrialContext") -> None:
        self.stage(task, sandbox, trial)

    def grade(self, task: Task, sandbox: "Sandbox", trial: "TrialContext", outcome: AgentOutcome) -> Grade:
        features = task.data["features"]
        task_dir = Path(task.data["task_dir"])
        # The grading sandbox is fresh, but its /patches must hold only what is put there now.
        trial.flag_tampering(clear_verifier_inputs(sandbox, dirs=(grading.PATCHES_DIR,), make=(grading.PATCHES_DIR,)))
        raw = outcome.submission or ""
        if grading.filter_test_files(raw) != (raw if not raw or raw.endswith("\n") else raw + "\n"):
            trial.flag_tampering(["the agent's patch changes test files (left out, as CooperBench does)"])
        for index, feature in enumerate(features, 1):
            sandbox.upload(task_dir / f"feature{feature}" / "tests.patch", f"{grading.PATCHES_DIR}/tests{index}.patch")
        base = grading.base_commit(sandbox)
        patch = grading.filter_test_files(outcome.submission or "")
        details: dict[str, Any] = {"setting": self.setting, "features": features}
        if self.setting == "coop":
            test_patch, nothing = self.merge_patches(sandbox, trial, patch, details)
        else:
            test_patch, nothing = "agent.patch", "empty patch: nothing to test"
            trial.write("patch.diff", patch)
            details["patch"] = patch
            if patch.strip():
                grading.put_patch(sandbox, trial, test_patch, patch)
                nothing = ""
        if nothing:
            results = [grading.FeatureResult(f, False, -1, 0, 0) for f in features]
            message = nothing
        else:
            results = [grading.run_feature_tests(sandbox, trial, f, f"tests{i}.patch", test_patch, base,
                                                 task.verify_timeout_s) for i, f in enumerate(features, 1)]
            message = "; ".join(f"feature {r.feature}: {'passed' if r.passed else 'failed'} "
                                f"({r.tests_passed} passed, {r.tests_failed} failed)" for r in results)
            if self.setting == "coop":
                message = f"merge {details['merge_status']} ({details['merge_strategy']}); {message}"
        passed = all(r.passed for r in results)
        details["feature_results"] = [r.as_dict() for r in results]
        return Grade(passed=passed, reward=float(passed), rewards={f"feature{r.feature}": float(r.passed) for r in results},
                     message=message, details=details)

    def merge_patches(self, sandbox: "Sandbox", trial: "TrialContext", patch: str,
                      details: dict[str, Any]) -> tuple[str, str]:
        """coop: both agents' patches merged into /patches/merged.patch, their records in `details`;
        returns the patch to test and, when there is nothing to test, why."""
        record = json.loads((trial.dir / AGENTS_FILE).read_text())
        patches = {AGENTS[0]: patch, AGENTS[1]: grading.filter_test_files(record[AGENTS[1]]["patch"])}
        for agent, text in patches.items():
            trial.write(f"{agent}.patch", text)
        merged = grading.merge(sandbox, trial, patches[AGENTS[0]], patches[AGENTS[1]])
        details.update({**merged, "patches": patches, "messages": record.get("messages", 0),
                        "agents": {a: {k: v for k, v in record[a].items() if k != "patch"} for a in AGENTS}})
        if not merged["union_clean"]:
            return "", "the patches conflict even under the union merge"
        if not merged["merged_diff"].strip():
            return "", "nothing merged to test"
        return "merged.patch", ""

    # -- summary -------------------------------------------------------------------------
    def summarize(self, results: list["TrialResult"]) -> dict[str, Any]:
        """coop: the share of graded pairs whose patches conflicted under a plain git merge."""
        statuses = [r.details.get("merge_status") for r in results if r.details.get("merge_status")]
        if not statuses:
            return {}
        conflicts = sum(1 for s in statuses if s == "conflicts")
        return {"merge_conflict_rate": round(conflicts / len(statuses), 6),
                "merge_statuses": {s: statuses.count(s) for s in sorted(set(statuses))}}


def usage_of(outcome: AgentOutcome | TrialError) -> Usage:
    return (outcome.usage or Usage()) if isinstance(outcome, TrialError) else outcome.usage


def features_of(task_dir: Path) -> list[int]:
    found = (re.fullmatch(r"feature(\d+)", p.name) for p in task_dir.iterdir() if p.is_dir())
    return sorted(int(m.group(1)) for m in found if m)


def task_number(task_dir: Path) -> int:
    match = re.fullmatch(r"task(\d+)", task_dir.name)
    return int(match.group(1)) if match else -1


def image_fields(repo: str, number: int) -> dict[str, Any]:
    """What a recipe's image template may use: {repo} (dir name), {repo_slug} (CooperBench's image name
    part: `_task` dropped, `_` as `-`) and {task_id} (the number)."""
    return {"repo": repo, "repo_slug": repo.replace("_task", "").replace("_", "-"), "task_id": number}


def coop_instruction(feature_text: str, agent: str) -> str:
    other = AGENTS[1] if agent == AGENTS[0] else AGENTS[0]
    return COOP_TEMPLATE.format(feature=feature_text.rstrip(), agent=agent, other=other)


def tree_diff(sandbox: "Sandbox", workdir: str) -> str:
    """`git diff` of the tree against the trial's start, untracked files included, the repository's index untouched."""
    script = (
        'index=$(mktemp); cp "$(git rev-parse --git-dir)/index" "$index" 2>/dev/null; '
        'GIT_INDEX_FILE="$index" git add -A -- . && '
        f'GIT_INDEX_FILE="$index" git diff --cached --no-color --no-ext-diff --binary {shlex.quote(START_REF)} -- .; '
        'code=$?; rm -f "$index"; exit $code'
    )
    result = sandbox.exec(script, cwd=workdir, timeout=grading.GIT_TIMEOUT)
    if not result.ok:
        raise InfraError(f"cannot diff {workdir}: {result.stderr.strip()[-300:]}")
    return result.stdout
