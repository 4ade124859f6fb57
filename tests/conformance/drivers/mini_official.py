"""Runs inside the mini-swe-agent 2.4.6 side venv: its SWE-bench runner's process_instance on one instance,
as `mini-extra swebench` calls it. stdin: {row, out, api_base, label, agent, environment}; stdout: JSON
{exit_status, patch, trajectory}. Containers it started are found by their label and removed."""

import json
import os
import subprocess
import sys
from pathlib import Path

os.environ["MSWEA_SILENT_STARTUP"] = "1"
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # no price-map download


def main() -> None:
    request = json.load(sys.stdin)
    answer = sys.stdout
    sys.stdout = sys.stderr
    from minisweagent.config import get_config_from_spec
    from minisweagent.run.benchmarks.swebench import DEFAULT_CONFIG_FILE, process_instance
    from minisweagent.run.benchmarks.utils.batch_progress import RunBatchProgressManager
    from minisweagent.utils.serialize import recursive_merge

    out = Path(request["out"])
    row = request["row"]
    config = recursive_merge(get_config_from_spec(str(DEFAULT_CONFIG_FILE)), {
        "model": {"model_name": "openai/fake-coder-1", "cost_tracking": "ignore_errors",
                  "model_kwargs": {"api_base": request["api_base"], "api_key": "EMPTY"}},
        "environment": {"run_args": ["--rm", "--label", request["label"]], **request.get("environment", {})},
        "agent": request.get("agent", {}),
    })
    try:
        process_instance({**row, "image_name": row["image"]}, out, config, RunBatchProgressManager(1, out / "exits.yaml"))
    finally:
        found = subprocess.run(["docker", "ps", "-aq", "--filter", f"label={request['label']}"],
                               capture_output=True, text=True)
        if found.stdout.split():
            subprocess.run(["docker", "rm", "-f", *found.stdout.split()], capture_output=True)
    instance = row["instance_id"]
    prediction = json.loads((out / "preds.json").read_text())[instance]
    trajectory = json.loads((out / instance / f"{instance}.traj.json").read_text())
    json.dump({"exit_status": trajectory["info"]["exit_status"], "patch": prediction["model_patch"],
               "model_name_or_path": prediction["model_name_or_path"], "trajectory": trajectory}, answer)


if __name__ == "__main__":
    main()
