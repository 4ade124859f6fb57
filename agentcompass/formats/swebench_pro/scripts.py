"""SWE-bench Pro's own grading material, per instance, from Scale AI's repository (SWE-bench_Pro-os): the test
runner `run_scripts/<id>/run_script.sh`, the output parser `run_scripts/<id>/parser.py`, and the two Dockerfiles
whose ENV lines the official evaluation exports before it runs them. The entry script below is composed the way
its evaluation composes it (swe_bench_pro_eval.py, read from the source): reset to the base commit, `git apply -v`
of the patch (binary hunks left out), the last line of `before_repo_set_cmd`, the run script on the selected test
files into stdout/stderr logs, then the parser into output.json. An instance passes when every FAIL_TO_PASS and
PASS_TO_PASS test is PASSED in output.json; without output.json it does not.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

from agentcompass.core.errors import UserError

WORKSPACE = "/workspace"  # where the official evaluation puts the files it runs
FILES = ("patch.diff", "run_script.sh", "parser.py", "entryscript.sh")


def as_list(value: Any, field: str, instance_id: str) -> list[str]:
    """The dataset keeps its test lists as Python list literals in strings (the official code eval()s them);
    read them without executing anything."""
    if isinstance(value, list):
        return [str(v) for v in value]
    text = str(value or "").strip()
    if not text:
        return []
    try:
        parsed = json.loads(text)
    except ValueError:
        try:
            parsed = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            raise UserError(f"SWE-bench Pro row {instance_id}: {field} is not a list ({text[:80]!r})") from None
    if not isinstance(parsed, list):
        raise UserError(f"SWE-bench Pro row {instance_id}: {field} is not a list ({text[:80]!r})")
    return [str(v) for v in parsed]


def instance_files(scripts_root: Path, instance_id: str) -> dict[str, str]:
    """The instance's run script, parser and Dockerfiles, by role; UserError naming what is missing."""
    paths = {
        "run_script.sh": scripts_root / "run_scripts" / instance_id / "run_script.sh",
        "parser.py": scripts_root / "run_scripts" / instance_id / "parser.py",
        "base_dockerfile": scripts_root / "dockerfiles" / "base_dockerfile" / instance_id / "Dockerfile",
        "instance_dockerfile": scripts_root / "dockerfiles" / "instance_dockerfile" / instance_id / "Dockerfile",
    }
    missing = [str(p.relative_to(scripts_root)) for p in paths.values() if not p.is_file()]
    if missing:
        raise UserError(f"SWE-bench Pro instance {instance_id}: its scripts repository lacks {', '.join(missing)}; "
                        "check the recipe's source (the SWE-bench_Pro-os checkout and its ref)")
    return {role: path.read_text(encoding="utf-8") for role, path in paths.items()}


def env_exports(*dockerfiles: str) -> list[str]:
    """Every ENV line of the Dockerfiles as an export, in order (the official evaluation's translation)."""
    exports = []
    for text in dockerfiles:
        for line in text.split("\n"):
            line = line.strip()
            if line.startswith("ENV"):
                exports.append(line.replace("ENV", "export", 1))
    return exports


def entry_script(row: dict[str, Any], files: dict[str, str], workdir: str = "/app") -> str:
    """The script the official evaluation runs in the instance's container."""
    before = str(row.get("before_repo_set_cmd") or "").strip().split("\n")[-1]
    selected = ",".join(row["selected_test_files_to_run"])
    base = row["base_commit"]
    exports = "\n".join(env_exports(files["base_dockerfile"], files["instance_dockerfile"]))
    return (f"\n{exports}\n# apply patch\ncd {workdir}\ngit reset --hard {base}\ngit checkout {base}\n"
            f"git apply -v {WORKSPACE}/patch.diff\n{before}\n"
            "# run test and save stdout and stderr to separate files\n"
            f"bash {WORKSPACE}/run_script.sh {selected} > {WORKSPACE}/stdout.log 2> {WORKSPACE}/stderr.log\n"
            "# run parsing script\n"
            f"python {WORKSPACE}/parser.py {WORKSPACE}/stdout.log {WORKSPACE}/stderr.log {WORKSPACE}/output.json\n")


def without_binary_hunks(patch: str) -> str:
    """The patch without the sections of binary files, which the official evaluation drops before applying."""
    if not patch:
        return patch
    sections = re.split(r"(?=^diff --git )", patch, flags=re.MULTILINE)
    return "".join(s for s in sections if s.strip() and not re.search(r"^Binary files .* differ$", s, re.MULTILINE)
                   and not re.search(r"^GIT binary patch$", s, re.MULTILINE))


def resolved(row: dict[str, Any], output: dict[str, Any] | None) -> tuple[bool, dict[str, list[str]]]:
    """(passed, the tests by outcome): every FAIL_TO_PASS and PASS_TO_PASS test PASSED in the parser's output."""
    passed = {str(t.get("name")) for t in (output or {}).get("tests", []) if t.get("status") == "PASSED"}
    wanted = {"FAIL_TO_PASS": row["fail_to_pass"], "PASS_TO_PASS": row["pass_to_pass"]}
    report = {f"{field}_{'passed' if ok else 'failed'}": [t for t in tests if (t in passed) == ok]
              for field, tests in wanted.items() for ok in (True, False)}
    return output is not None and set(row["fail_to_pass"]) | set(row["pass_to_pass"]) <= passed, report


def image_uri(instance_id: str, repo: str, user: str) -> str:
    """Where the official images are: USER/sweap-images:TAG, TAG made from the repository and the instance id
    (lower-cased repo, the id without `instance_` and, but for element-web's one exception, without `-vnan`)."""
    owner, name = repo.lower().split("/", 1)
    rest = instance_id.removeprefix("instance_")
    if instance_id == "instance_element-hq__element-web-ec0f940ef0e8e3b61078f145f34dc40d1938e6c5-vnan":
        name = "element-web"
    elif "element-hq" in repo.lower() and "element-web" in repo.lower():
        name = "element"
        rest = rest.removesuffix("-vnan")
    else:
        rest = rest.removesuffix("-vnan")
    return f"{user}/sweap-images:{f'{owner}.{name}-{rest}'[:128]}"
