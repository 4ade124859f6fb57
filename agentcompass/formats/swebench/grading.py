"""The verdict on a SWE-bench submission once it is applied: the instance's eval script (swebench's test spec,
image assets restored before the tests), its log fetched whole, and swebench's own report on that log.

Both ways of grading use it: in a sandbox (format.py runs the script there) and on a batch backend
(batch.py runs it remotely and grades the log it brings back), so the two reach the same verdict."""

from __future__ import annotations

import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentcompass.core.errors import InfraError, UserError
from agentcompass.core.safe_files import download_checked
from agentcompass.core.task import Grade, Task
from agentcompass.formats.swebench.classic import ClassicSpec
from agentcompass.formats.swebench.constants import ASSETS_DIR, EVAL_LOG_PATH
from agentcompass.formats.swebench.data import classic_eval_script, has_eval_script, instance_for_test_spec
from agentcompass.formats.swebench.report import INSTANCE_REPORT, instance_report_text

if TYPE_CHECKING:
    from agentcompass.core.sandbox import Sandbox
    from agentcompass.core.context import TrialContext

EVAL_LOG_DETAIL_CAP = 20_000  # characters of eval log kept in trials.jsonl; eval.log has it whole


def eval_script(task: Task, sandbox: "Sandbox | None", trial: "TrialContext") -> tuple[Any, str]:
    """swebench's test spec of the instance and its eval script (image assets restored before the tests;
    they need a sandbox to stage them in)."""
    spec = test_spec(task.data, task.image or "")
    if sandbox is None:
        if any((spec.image_assets or {}).get(key) for key in ("test_patch", "patch")):
            raise UserError(f"{task.id} has image_assets, which eval on GCP Batch does not stage; "
                            "evaluate it with --env docker or modal")
        return spec, spec.eval_script
    return spec, inject_asset_restore(spec.eval_script, stage_image_assets(spec.image_assets, sandbox, trial))


def grade_log(task: Task, trial: "TrialContext", patch: str, mode: str, spec: Any, log: str, timed_out: bool) -> Grade:
    """The verdict on an eval log (written whole to eval.log first), by swebench's get_eval_report
    (4.1.0's rules for classic rows: formats/swebench/classic.py)."""
    if timed_out:  # the official harness notes it in the log the same way, then counts no result
        log += f"\n\nTimeout error: {task.verify_timeout_s:.0f} seconds exceeded."
        trial.write("eval.log", log)
        return unresolved(task, trial, patch, mode, f"tests timed out after {task.verify_timeout_s:.0f}s", log)
    prediction = {"instance_id": task.id, "model_name_or_path": model_name(trial), "model_patch": patch}
    official = eval_report(spec, prediction, trial.dir / "eval.log")
    trial.write(INSTANCE_REPORT, instance_report_text(official))  # as run_evaluation writes it
    report = official[task.id]
    status = report.get("tests_status") or {}
    f2p = status.get("FAIL_TO_PASS") or {"success": [], "failure": []}
    p2p = status.get("PASS_TO_PASS") or {"success": [], "failure": []}
    resolved = bool(report["resolved"])
    if not report["patch_successfully_applied"]:
        message = "no test results in eval.log (the test patch or the test run failed)"
        if report.get("infra_failure_reason"):  # advisory, as in swebench: the instance stays unresolved
            message += f"; likely cause: {report['infra_failure_reason']}"
    else:
        message = (f"{'resolved' if resolved else 'not resolved'}: FAIL_TO_PASS {fraction_text(f2p)} passed, "
                   f"PASS_TO_PASS {fraction_text(p2p)} passed")
    return Grade(
        passed=resolved,
        reward=float(resolved),
        rewards={"fail_to_pass": fraction(f2p), "pass_to_pass": fraction(p2p)},
        message=message,
        details={**base_details(task, trial, patch, mode, log), "resolved": resolved,
                 "tests_parsed": bool(report["patch_successfully_applied"]),
                 "infra_failure": bool(report.get("infra_failure")),
                 "infra_failure_reason": report.get("infra_failure_reason"),
                 "FAIL_TO_PASS": f2p, "PASS_TO_PASS": p2p, "official_report": official},
    )


def unresolved(task: Task, trial: "TrialContext", patch: str, mode: str, message: str, log: str = "") -> Grade:
    details = {**base_details(task, trial, patch, mode, log), "resolved": False, "tests_parsed": False}
    return Grade(passed=False, reward=0.0, message=message, details=details)


def base_details(task: Task, trial: "TrialContext", patch: str, mode: str, log: str) -> dict[str, Any]:
    return {"instance_id": task.id, "model_name_or_path": model_name(trial), "patch": patch,
            "evaluation_mode": mode, "eval_log": log[-EVAL_LOG_DETAIL_CAP:]}


def fetch_eval_log(sandbox: "Sandbox", trial: "TrialContext") -> str:
    """eval.log as the official harness writes it: the whole output, decoded with replacement."""
    raw = trial.dir / ".eval.log.raw"
    try:
        download_checked(sandbox, EVAL_LOG_PATH, raw, trial)  # a link planted there: tampering, never followed
        log = raw.read_bytes().decode("utf-8", errors="replace")
    except FileNotFoundError:
        log = ""
    finally:
        raw.unlink(missing_ok=True)
    trial.write("eval.log", log)
    return log


def stage_image_assets(image_assets: dict[str, Any], sandbox: "Sandbox", trial: "TrialContext") -> list[str]:
    """Binary files a text patch cannot carry (SWE-bench Multimodal baselines), put in /image_assets
    and restored into the tree before the tests, as swebench 5.x run_evaluation does."""
    restore = []
    for key in ("test_patch", "patch"):
        for asset in (image_assets or {}).get(key) or []:
            if not asset.get("path") or not asset.get("url"):
                continue  # the official harness skips an asset it has no source for
            flat = asset["path"].replace("/", "__")
            local = trial.dir / "image_assets" / flat
            local.parent.mkdir(parents=True, exist_ok=True)
            try:
                with urllib.request.urlopen(asset["url"], timeout=60) as response:
                    local.write_bytes(response.read())
            except (OSError, ValueError) as exc:  # unreachable: infra, retried (the official harness skips it)
                raise InfraError(f"cannot fetch image asset {asset['url']}: {exc}") from exc
            sandbox.upload(local, f"{ASSETS_DIR}/{flat}")
            restore.append(f"mkdir -p $(dirname {asset['path']}) && cp {ASSETS_DIR}/{flat} {asset['path']}")
    return restore


def test_spec(row: dict[str, Any], image: str) -> Any:
    """swebench 5.x's test spec of a 5.x row; for a classic row the spec 4.1.0 grades it by, with
    4.1.0's eval script as is (5.x's make_test_spec would add its exit-code line, which 4.1.0 lacks)."""
    if not has_eval_script(row):
        from agentcompass.formats.swebench.classic import END_TEST_OUTPUT, START_TEST_OUTPUT

        return ClassicSpec(instance_id=row["instance_id"], repo=row["repo"], FAIL_TO_PASS=row["FAIL_TO_PASS"],
                           PASS_TO_PASS=row["PASS_TO_PASS"],
                           eval_script=classic_eval_script(row, START_TEST_OUTPUT, END_TEST_OUTPUT))
    from swebench.harness.utils import make_test_spec

    return make_test_spec(instance_for_test_spec(row, image))


def eval_report(spec: Any, prediction: dict[str, Any], log: Path) -> dict[str, Any]:
    """The official per-instance report (report.json) of an eval log: 4.1.0's rules for a classic row's
    spec, swebench 5.x's get_eval_report for a 5.x row's."""
    if isinstance(spec, ClassicSpec):
        from agentcompass.formats.swebench.classic import get_eval_report
    else:
        from swebench.harness.grading import get_eval_report
    return get_eval_report(spec, prediction, str(log), include_tests_status=True)


def inject_asset_restore(eval_script: str, restore: list[str]) -> str:
    """The restore commands just before the test-output start marker (swebench 5.x _inject_asset_restore)."""
    from swebench.harness.constants import START_TEST_OUTPUT

    if not restore:
        return eval_script
    lines = eval_script.split("\n")
    for index, line in enumerate(lines):
        if START_TEST_OUTPUT in line:
            return "\n".join(lines[:index] + restore + lines[index:])
    return eval_script + "\n" + "\n".join(restore)


def model_name(trial: "TrialContext") -> str:
    return trial.labels.get("model_name") or trial.labels.get("model") or "agentcompass"


def fraction(outcomes: dict[str, list[str]]) -> float:
    total = len(outcomes["success"]) + len(outcomes["failure"])
    return len(outcomes["success"]) / total if total else 1.0


def fraction_text(outcomes: dict[str, list[str]]) -> str:
    return f"{len(outcomes['success'])}/{len(outcomes['success']) + len(outcomes['failure'])}"
