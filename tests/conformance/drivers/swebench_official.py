"""Runs inside a side venv holding one official swebench (4.1.0 or 5.0.2); the suite's only door to it.

stdin: {"command": ..., ...} as JSON; stdout: one JSON document. Commands:
  versions                  {repo: [versions]} of the harness's own test specifications (4.x only)
  grade {cases}             per case: the eval script make_test_spec builds and get_eval_report's report
  run_report {...}          make_run_report's report over a run_evaluation log layout
  read_predictions {paths}  per file: get_predictions_from_file's predictions, or the error it raised
"""

import json
import sys
import tempfile
import traceback
from pathlib import Path

from swebench.harness import grading, utils

try:  # 4.x
    from swebench.harness.test_spec import test_spec as _test_spec_module
    from swebench.harness.test_spec.test_spec import make_test_spec

    # 4.x builds the image's environment script too, fetching requirements from GitHub; it plays no part in
    # the eval script or the grading, and this machine has no network: an empty one stands in.
    _test_spec_module.make_env_script_list = lambda *args, **kwargs: []
except ImportError:  # 5.x
    from swebench.harness.utils import make_test_spec


def error_of(exc: BaseException) -> dict:
    return {"error": type(exc).__name__, "detail": "".join(traceback.format_exception_only(exc))[-300:]}


def grade(cases: list[dict]) -> list[dict]:
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for index, case in enumerate(cases):
            log = Path(tmp) / f"{index}.log"
            log.write_bytes(case["log"].encode("utf-8", errors="surrogateescape"))
            try:
                spec = make_test_spec(case["row"])
                report = grading.get_eval_report(spec, case["prediction"], str(log), include_tests_status=True)
                out.append({"eval_script": spec.eval_script, "report": report})
            except Exception as exc:  # the verdict of the official code is an exception: compared as such
                out.append(error_of(exc))
    return out


def read_predictions(paths: list[str]) -> list[dict]:
    out = []
    for path in paths:
        try:
            out.append({"predictions": utils.get_predictions_from_file(path, "unused", "test")})
        except Exception as exc:
            out.append(error_of(exc))
    return out


def run_report(request: dict) -> dict:
    """make_run_report over run_evaluation's log layout (report.json and test_output.txt per instance),
    with a Docker client as the CLI passes one."""
    import os

    import docker
    from swebench.harness import reporting

    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        for instance_id, files in request["logs"].items():
            model = request["predictions"][instance_id]["model_name_or_path"].replace("/", "__")
            folder = Path(tmp) / "logs" / "run_evaluation" / request["run_id"] / model / instance_id
            folder.mkdir(parents=True)
            for name, text in files.items():
                (folder / name).write_text(text)
        for tries_left in reversed(range(5)):
            try:
                path = reporting.make_run_report(request["predictions"], request["dataset"], request["run_id"],
                                                 docker.from_env())
                break
            except docker.errors.NotFound:
                # It lists the engine's containers, then inspects each: on an engine shared with other test
                # workers, one can go in between (404). The listing is all it wanted them for: ask again.
                if not tries_left:
                    raise
        return json.loads(Path(path).read_text())


def main() -> None:
    request = json.load(sys.stdin)
    command = request["command"]
    out = sys.stdout
    sys.stdout = sys.stderr  # what swebench prints is not the answer
    if command == "versions":
        from swebench.harness.constants import MAP_REPO_VERSION_TO_SPECS

        result = {repo: sorted(specs) for repo, specs in MAP_REPO_VERSION_TO_SPECS.items()}
    elif command == "grade":
        result = grade(request["cases"])
    elif command == "run_report":
        result = run_report(request)
    elif command == "read_predictions":
        result = read_predictions(request["paths"])
    else:
        raise SystemExit(f"unknown command {command}")
    json.dump(result, out)


if __name__ == "__main__":
    main()
