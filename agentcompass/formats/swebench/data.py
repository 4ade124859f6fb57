"""SWE-bench rows: loading (Hugging Face dataset or a local file), normalising, image names,
and the eval script of classic rows.

Two row shapes exist. SWE-bench 5.x rows (the SWE-bench/* datasets on the hub) carry
`image`, `eval_script`, `log_parser` and `eval_type`, which is all swebench 5.x's
`make_test_spec` needs. Classic rows (princeton-nlp/*, older exports) carry only repo,
version, test_patch and the test lists: their eval script is built here the way the
swebench 4.x harness built it from its per-repository test specification.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from agentcompass.core.errors import UserError

DEFAULT_IMAGE = "swebench/sweb.eval.x86_64.{instance_id_1776}:latest"
TEST_LISTS = ("FAIL_TO_PASS", "PASS_TO_PASS")
CLASSIC_KEYS = ("instance_id", "repo", "base_commit", "test_patch", "FAIL_TO_PASS", "PASS_TO_PASS")

# -- loading -------------------------------------------------------------------------------


def read_rows_file(path: Path) -> list[dict[str, Any]]:
    """Rows from a .json list, a .jsonl file, or a .parquet file (what the hub serves)."""
    try:
        if path.suffix == ".parquet":
            from datasets import load_dataset

            return [dict(r) for r in load_dataset("parquet", data_files=str(path), split="train")]
        with path.open(encoding="utf-8") as lines:  # lines end at \n, \r\n or \r only, never inside a string
            rows = [json.loads(line) for line in lines if line.strip()] if path.suffix == ".jsonl" else json.load(lines)
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read SWE-bench rows from {path}: {exc}; pass a .json list or a .jsonl file") from exc
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise UserError(f"{path} must hold a list of SWE-bench rows (objects with instance_id, repo, ...)")
    return rows


@lru_cache(maxsize=8)
def read_hf_dataset(name: str, split: str) -> tuple[dict[str, Any], ...]:
    """A hub dataset through `datasets` (which caches it on disk); cached in-process too."""
    try:
        from datasets import load_dataset
    except ImportError as exc:
        from agentcompass.core.install import pip_install

        raise UserError("loading SWE-bench from the Hugging Face hub needs `datasets`; "
                        f"{pip_install('swebench')} or pass --benchmark-params '{{\"path\": FILE}}'") from exc
    from agentcompass.formats.sources import hub_endpoint, offline_unless_hub_answers

    offline = not Path(name).exists() and offline_unless_hub_answers()
    try:
        dataset = load_dataset(name, split=split)
    except Exception as exc:  # network, auth, unknown split: all mean the source is unusable as given
        reason = (f"the hub ({hub_endpoint()}) did not answer or HF_HUB_OFFLINE is set, and it is not in the local cache"
                  if offline else " ".join(str(exc).split())[:300])
        raise UserError(f"cannot load dataset '{name}' split '{split}': {reason}; "
                        f"check the name and split, or pass a local file with --benchmark-params '{{\"path\": FILE}}'") from exc
    return tuple(dict(row) for row in dataset)


# -- normalising ---------------------------------------------------------------------------


def as_test_list(value: Any, field: str, instance_id: str) -> list[str]:
    """FAIL_TO_PASS / PASS_TO_PASS: a JSON-encoded string on the hub, a list in local exports."""
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else []
        except ValueError as exc:
            raise UserError(f"{instance_id}: {field} is neither a list nor a JSON list: {exc}") from exc
    if not isinstance(value, list):
        raise UserError(f"{instance_id}: {field} must be a list of test names, got {type(value).__name__}")
    return [str(v) for v in value]


def normalize_row(row: dict[str, Any]) -> dict[str, Any]:
    missing = [k for k in CLASSIC_KEYS if k not in row]
    if missing:
        raise UserError(f"SWE-bench row {row.get('instance_id', '?')} lacks {', '.join(missing)}; "
                        f"rows need {', '.join(CLASSIC_KEYS)}")
    out = dict(row)
    out["instance_id"] = str(row["instance_id"])
    out["version"] = str(row.get("version") or "")
    for field in TEST_LISTS:
        out[field] = as_test_list(row[field], field, out["instance_id"])
    return out


def image_name(row: dict[str, Any], template: str | None) -> str:
    """The row's own `image`, else the recipe template (lower case, as Docker requires)."""
    if row.get("image"):
        return str(row["image"])
    instance_id = row["instance_id"]
    fields = {**{k: v for k, v in row.items() if isinstance(v, str)},
              "instance_id_1776": instance_id.replace("__", "_1776_")}
    try:
        return (template or DEFAULT_IMAGE).format(**fields).lower()
    except (KeyError, IndexError, ValueError) as exc:
        raise UserError(f"image template '{template}' uses an unknown field {exc}; "
                        f"use {{instance_id}}, {{instance_id_1776}}, {{repo}} or {{version}}") from exc


# -- classic rows: the eval script from the repository's test specification ------------------

PYTEST = "pytest -rA"
# Test command per repository, with the versions that differ (swebench 4.x MAP_REPO_VERSION_TO_SPECS).
TEST_COMMANDS: dict[str, str] = {
    "astropy/astropy": PYTEST,
    "django/django": "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1",
    "marshmallow-code/marshmallow": PYTEST,
    "matplotlib/matplotlib": PYTEST,
    "mwaskom/seaborn": "pytest --no-header -rA",
    "pallets/flask": PYTEST,
    "psf/requests": PYTEST,
    "pvlib/pvlib-python": PYTEST,
    "pydata/xarray": PYTEST,
    "pydicom/pydicom": PYTEST,
    "pylint-dev/astroid": PYTEST,
    "pylint-dev/pylint": PYTEST,
    "pytest-dev/pytest": PYTEST,
    "pyvista/pyvista": PYTEST,
    "scikit-learn/scikit-learn": PYTEST,
    "sphinx-doc/sphinx": "tox --current-env -epy39 -v --",
    "sqlfluff/sqlfluff": PYTEST,
    "sympy/sympy": "PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' bin/test -C --verbose",
}
TEST_COMMAND_BY_VERSION: dict[tuple[str, str], str] = {
    ("django/django", "1.9"): "./tests/runtests.py --verbosity 2",
    **{("astropy/astropy", v): "pytest -rA -vv -o console_output_style=classic --tb=no"
       for v in ("0.1", "0.2", "0.3", "0.4", "1.1", "1.2", "1.3")},
}
# The (re)install each eval runs before the tests.
INSTALL: dict[str, str] = {
    "astropy/astropy": "python -m pip install -e .[test] --verbose",
    "django/django": "python -m pip install -e .",
    "marshmallow-code/marshmallow": "python -m pip install -e '.[dev]'",
    "matplotlib/matplotlib": "python -m pip install -e .",
    "mwaskom/seaborn": "python -m pip install -e .[dev]",
    "psf/requests": "python -m pip install .",
    "pvlib/pvlib-python": "python -m pip install -e .[all]",
    "scikit-learn/scikit-learn": "python -m pip install -v --no-use-pep517 --no-build-isolation -e .",
    "sphinx-doc/sphinx": "python -m pip install -e .[test]",
}
DJANGO_OLD = ("1.4", "1.5", "1.6", "1.7", "1.8", "1.9", "1.10", "1.11", "2.0", "2.1", "2.2")
INSTALL_BY_VERSION: dict[tuple[str, str], str] = {
    **{("django/django", v): "python setup.py install" for v in DJANGO_OLD},
    ("mwaskom/seaborn", "0.11"): "python -m pip install -e .",
    **{("matplotlib/matplotlib", v): "python -m pip install --no-build-isolation -e \".[dev]\"" for v in ("3.8", "3.9")},
    **{("matplotlib/matplotlib", v): "python setup.py build; python setup.py install"
       for v in ("1.0", "1.1", "1.2", "1.3", "1.4", "1.5", "2.0", "2.1", "2.2")},
}
LOCALE = ["export LANG=en_US.UTF-8", "export LC_ALL=en_US.UTF-8", "export PYTHONIOENCODING=utf8", "export LANGUAGE=en_US:en"]
LOCALE_GEN = ["sed -i '/en_US.UTF-8/s/^# //g' /etc/locale.gen && locale-gen", "export LANG=en_US.UTF-8",
              "export LANGUAGE=en_US:en", "export LC_ALL=en_US.UTF-8"]
ENV_COMMANDS: dict[tuple[str, str], list[str]] = {
    **{("django/django", v): LOCALE for v in ("1.7", "1.8", "1.9", "1.10", "1.11", "2.0", "2.1", "2.2")},
    **{("django/django", v): LOCALE_GEN for v in ("3.0", "3.1", "3.2")},
}
LOG_PARSERS: dict[str, str] = {
    "astropy/astropy": "parse_log_astropy", "django/django": "parse_log_django",
    "marshmallow-code/marshmallow": "parse_log_marshmallow", "matplotlib/matplotlib": "parse_log_matplotlib",
    "mwaskom/seaborn": "parse_log_seaborn", "pallets/flask": "parse_log_flask", "psf/requests": "parse_log_requests",
    "pvlib/pvlib-python": "parse_log_pvlib", "pydata/xarray": "parse_log_xarray", "pydicom/pydicom": "parse_log_pydicom",
    "pylint-dev/astroid": "parse_log_astroid", "pylint-dev/pylint": "parse_log_pylint",
    "pytest-dev/pytest": "parse_log_pytest", "pyvista/pyvista": "parse_log_pyvista",
    "scikit-learn/scikit-learn": "parse_log_scikit", "sqlfluff/sqlfluff": "parse_log_sqlfluff",
    "sphinx-doc/sphinx": "parse_log_sphinx", "sympy/sympy": "parse_log_sympy",
}
NON_TEST_SUFFIXES = (".json", ".png", "csv", ".txt", ".md", ".jpg", ".jpeg", ".pkl", ".yml", ".yaml", ".toml")
HEREDOC = "EOF_114329324912"


def has_eval_script(row: dict[str, Any]) -> bool:
    return bool(row.get("eval_script"))


def check_gradable(row: dict[str, Any]) -> None:
    """Fail before the run when a classic row's repository has no known test specification."""
    if not has_eval_script(row) and row["repo"] not in TEST_COMMANDS:
        raise UserError(f"{row['instance_id']}: repo '{row['repo']}' has no eval_script and no known test command; "
                        f"use SWE-bench 5.x rows (with eval_script, log_parser) for it")


def modified_files(patch: str) -> list[str]:
    """Files the patch changes that exist before it (swebench 4.x get_modified_files): created ones,
    text or binary, are left out, so the reset line names only files `git checkout` can restore."""
    from unidiff import PatchSet

    return [f.source_file[2:] for f in PatchSet(patch) if f.source_file != "/dev/null" and f.source_file.startswith("a/")]


def directives_of(row: dict[str, Any]) -> list[str]:
    files = re.findall(r"diff --git a/.* b/(.*)", row["test_patch"])
    files = [f for f in files if not f.endswith(NON_TEST_SUFFIXES)]
    if row["repo"] == "django/django":  # runtests.py takes dotted module names under tests/
        files = [f.removesuffix(".py").removeprefix("tests/").replace("/", ".") for f in files]
    return files


def classic_eval_script(row: dict[str, Any], start: str, end: str) -> str:
    """The eval script of a classic row: reset and patch the tests, run them between the markers."""
    repo, version, base = row["repo"], row["version"], row["base_commit"]
    # As swebench 4.1.0: with no modified files this is `git checkout <base> ` (no paths), and files
    # the test patch creates are not removed (a model that created one makes the test patch fail).
    reset = f"git checkout {base} {' '.join(modified_files(row['test_patch']))}"
    test_cmd = TEST_COMMAND_BY_VERSION.get((repo, version)) or TEST_COMMANDS[repo]
    install = INSTALL_BY_VERSION.get((repo, version)) or INSTALL.get(repo, "python -m pip install -e .")
    activate = ["source /opt/miniconda3/bin/activate", "conda activate testbed"]
    lines = [
        *activate, "cd /testbed", *ENV_COMMANDS.get((repo, version), []),
        "git config --global --add safe.directory /testbed", "cd /testbed",
        "git status", "git show", f"git -c core.fileMode=false diff {base}",
        *activate, install, reset,
        f"git apply -v - <<'{HEREDOC}'\n{row['test_patch']}\n{HEREDOC}",
        f": '{start}'", " ".join([test_cmd, *directives_of(row)]), f": '{end}'",
        reset,
    ]
    return "\n".join(["#!/bin/bash", "set -uxo pipefail", *lines]) + "\n"


def instance_for_test_spec(row: dict[str, Any], image: str) -> dict[str, Any]:
    """The row with every field swebench's make_test_spec reads, classic rows completed here."""
    from swebench.harness.constants import END_TEST_OUTPUT, FAIL_ONLY_REPOS, START_TEST_OUTPUT, EvalType

    full = {**row, "image": image}
    if not has_eval_script(row):
        full["eval_script"] = classic_eval_script(row, START_TEST_OUTPUT, END_TEST_OUTPUT)
    full["log_parser"] = row.get("log_parser") or LOG_PARSERS.get(row["repo"], "parse_log_pytest")
    if not full.get("eval_type"):
        fail_only = row["repo"] in FAIL_ONLY_REPOS
        full["eval_type"] = (EvalType.FAIL_ONLY if fail_only else EvalType.PASS_AND_FAIL).value
    return full
