"""A third-party env, task format and harness (tests/data/third_party), written as a user writes them: a package
on PYTHONPATH that imports only agentcompass.api, named by `impl:` (and a recipe's `format:`) in a user config
dir. They run end to end and are listed like the built-ins; a provider written against a path from before the
package split still runs, and the user is told where to import from instead."""

from __future__ import annotations

import ast
import json
import os
import re
from pathlib import Path

THIRD_PARTY = Path(__file__).resolve().parent / "data" / "third_party"
PLUGINS = THIRD_PARTY / "plugins"
CONFIG = THIRD_PARTY / "config"


def with_plugins(*extra: Path) -> dict[str, str]:
    paths = [*map(str, extra), str(PLUGINS), os.environ.get("PYTHONPATH", "")]
    return {"PYTHONPATH": os.pathsep.join(p for p in paths if p)}


def trials_of(job: Path) -> dict[str, dict]:
    return {t["task_id"]: t for t in map(json.loads, (job / "trials.jsonl").read_text().splitlines())}


def test_the_extension_imports_only_the_public_module():
    imported = set()
    for path in PLUGINS.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("agentcompass"):
                imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported |= {a.name for a in node.names if a.name.startswith("agentcompass")}
    assert imported == {"agentcompass.api"}


def test_a_third_party_env_format_and_harness_run_end_to_end(cli, tmp_path):
    result = cli("run", "-m", "arith", "calculator,oracle", "none", "--env", "subprocess", "--config-dir", str(CONFIG),
                 "--results-dir", str(tmp_path / "r"), "--run-name", "x", cwd=tmp_path, env=with_plugins())
    assert result.returncode == 0, result.stderr
    runs = {d.name: d for d in (tmp_path / "r" / "x").iterdir() if d.is_dir()}
    calculator = trials_of(runs["arith__calculator__none__subprocess"])
    # expr knows whole numbers only: 2 + 3 and 10 - 4 right, 7 / 2 answered 3
    assert {t: calculator[t]["status"] for t in calculator} == {"add": "passed", "subtract": "passed",
                                                                 "halve": "failed"}
    assert "answered '3', expected '3.5'" in calculator["halve"]["message"]
    oracle = trials_of(runs["arith__oracle__none__subprocess"])
    assert {t["status"] for t in oracle.values()} == {"passed"}  # the format's own solution passes its own grade


def test_the_list_shows_them_beside_the_built_ins(cli, tmp_path):
    result = cli("list", "--config-dir", str(CONFIG), cwd=tmp_path, env=with_plugins())
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any(line.split()[:1] == ["arith"] and "third-party task format" in line for line in lines)
    assert any(line.split()[:1] == ["calculator"] and "third-party harness" in line for line in lines)
    assert any(line.split()[:1] == ["subprocess"] and "third-party env" in line for line in lines)


OLD_IMPORTS = ("from agentcompass.sandbox import ExecResult, SandboxSpec\n"
               "from agentcompass.errors import InfraError, UserError\n"
               "from agentcompass.schema import Strict\n")


def test_a_provider_written_against_the_old_path_still_runs_and_says_so(cli, tmp_path):
    source = (PLUGINS / "arith_ext" / "subprocess_env.py").read_text()
    public = "from agentcompass.api import ExecResult, InfraError, SandboxSpec, Strict, UserError\n"
    assert public in source
    old_plugins = tmp_path / "old_plugins"
    old_plugins.mkdir()
    (old_plugins / "last_month_env.py").write_text(source.replace(public, OLD_IMPORTS))
    conf = tmp_path / "conf" / "providers"
    conf.mkdir(parents=True)
    (conf / "last_month.yaml").write_text("name: last_month\nimpl: last_month_env:SubprocessProvider\n")
    result = cli("run", "arith", "oracle", "none", "--env", "last_month", "--config-dir", str(CONFIG),
                 "--config-dir", str(tmp_path / "conf"), "--results-dir", str(tmp_path / "r"), "--run-name", "x",
                 cwd=tmp_path, env=with_plugins(old_plugins))
    assert result.returncode == 0, result.stderr
    trials = trials_of(tmp_path / "r" / "x" / "arith__oracle__none__last_month")
    assert {t["status"] for t in trials.values()} == {"passed"}
    for old in ("sandbox", "errors", "schema"):  # each named once, at the user's own import line
        warning = re.findall(rf"last_month_env\.py:\d+: DeprecationWarning: agentcompass\.{old} is deprecated: "
                             rf"it moved to agentcompass\.core\.{old}; import the extension contract from "
                             r"agentcompass\.api", result.stderr)
        assert len(warning) == 1, result.stderr


def test_the_docs_show_this_very_code():
    """docs/extending.md shows each file of the example as it is here, so the page's code is code that runs."""
    page = (THIRD_PARTY.parent.parent.parent / "docs" / "extending.md").read_text()
    shown = dict(re.findall(r"^`([\w/.]+\.(?:py|yaml))`:\n\n```\w+\n(.*?)^```$", page, flags=re.M | re.S))
    files = {**{str(p.relative_to(PLUGINS)): p for p in PLUGINS.rglob("*.py") if p.name != "__init__.py"},
             **{str(p.relative_to(CONFIG)): p for p in CONFIG.rglob("*.yaml")}}
    assert sorted(shown) == sorted(files)
    for name, path in files.items():
        assert shown[name] == path.read_text(), name
