"""Terminal-Bench vs terminal-bench 0.2.18 itself: its parsers on the captured test outputs (real pytest
8.4 and 9.0 runs, the other parsers' shapes) and on generated edge cases, through its own parser
factory and _is_resolved; and solution.yaml files through its TerminalCommand model vs our oracle's reader."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess

from conformance.conftest import anchor_python, check_divergences, run_driver
from conftest import DATA, run_cli

from agentcompass.formats.terminal_bench.format import grade_tests, last_rows, solution_keystrokes
from agentcompass.formats.terminal_bench.parsers import PASSING, ParseError, parse_test_output

ANCHOR = "terminal-bench 0.2.18"
CAPTURES = DATA / "terminal_bench_parsers" / "outputs"
REGISTRY = DATA / "terminal_bench_registry" / "registry.json"
SUMMARY = "=========================== short test summary info ============================"


def generated() -> dict[str, tuple[str, str]]:
    """name -> (parser, output): shapes the captures lack."""
    many = "\n".join(f"PASSED tests/test_x.py::test_{n}" for n in range(3000))
    return {
        "pane-tail-of-a-long-run": ("pytest", last_rows(f"{SUMMARY}\n{many}\nFAILED tests/test_x.py::test_end\n")),
        "long-line-wrapped-rows": ("pytest", last_rows(SUMMARY + "\nPASSED tests/t.py::test_" + "a" * 400 + "\n")),
        "unicode-separators": ("pytest", f"{SUMMARY}\nPASSED tests/t.py::test_a\u2028tail\nPASSED tests/t.py::test_b\n"),
        "tab-separated": ("pytest", f"{SUMMARY}\nPASSED\ttests/t.py::test_a\n"),
        "xfail-and-skipped": ("pytest", f"{SUMMARY}\nXFAIL tests/t.py::test_a - reason\nSKIPPED [1] tests/t.py:3: no\n"),
        "xpass": ("pytest", f"{SUMMARY}\nXPASS tests/t.py::test_a\n"),
        "param-with-spaces": ("pytest", f"{SUMMARY}\nPASSED tests/t.py::test_a[x y]\nFAILED tests/t.py::test_a[x z] - e\n"),
        "two-summaries": ("pytest", f"{SUMMARY}\nFAILED tests/t.py::test_a\n{SUMMARY}\nPASSED tests/t.py::test_a\n"),
        "empty-output": ("pytest", ""),
        "cr-only-lines": ("pytest", f"{SUMMARY}\rPASSED tests/t.py::test_a\rFAILED tests/t.py::test_b\r"),
    }


def test_parsers_give_the_official_verdicts(tmp_path, tally, allowed):
    cases = {path.name: (path.name.rsplit(".", 2)[-2], path.read_text(encoding="utf-8")) for path in sorted(CAPTURES.iterdir())}
    cases |= generated()
    official = run_driver(anchor_python(ANCHOR), "terminal_bench_official.py",
                          {"command": "parse", "cases": [{"parser": p, "output": o} for p, o in cases.values()]})
    found: dict[str, list[str]] = {"terminal-bench/verdict": [], "terminal-bench/tests": [],
                                   "terminal-bench-colour-codes": []}
    same = 0
    for (name, (parser, output)), theirs in zip(cases.items(), official, strict=True):
        try:
            tests = parse_test_output(parser, output)
            ours = {"tests": tests, "resolved": grade_tests(tests).passed}
        except ParseError:
            ours = {"error": "ParseError"}
        verdict = ("error" if "error" in theirs else theirs["resolved"]), ("error" if "error" in ours else ours["resolved"])
        if verdict[0] != verdict[1] and "\x1b[" in output:
            found["terminal-bench-colour-codes"].append(f"{name}: official {verdict[0]}, ours {verdict[1]}")
        elif verdict[0] != verdict[1]:
            found["terminal-bench/verdict"].append(f"{name}: official {verdict[0]}, ours {verdict[1]}")
        elif "tests" in theirs and theirs["tests"] != {k: "passed" if v in PASSING else "failed"
                                                        for k, v in ours["tests"].items()}:
            found["terminal-bench/tests"].append(name)
        else:
            same += 1
    tally.record(ANCHOR, "parser verdicts", same, len(cases))
    check_divergences(found, allowed)


SOLUTIONS = {
    "strings.yaml": "- echo hi\n- ls\n",
    "mappings.yaml": "- {command: make, block: true, max_timeout_sec: 600}\n- {command: C-c, append_enter: false}\n",
    "unknown-keys.yaml": "- {command: make, comment: builds it, timeout: 5}\n",
    "coerced.yaml": "- {command: make, block: 'true', max_timeout_sec: '60'}\n",
    "bad-bool.yaml": "- {command: make, block: maybe}\n",
    "number-command.yaml": "- {command: 42}\n",
    "empty.yaml": "",
}


def test_solution_yaml_read_as_terminal_command(tmp_path, tally, allowed):
    paths = []
    for name, text in SOLUTIONS.items():
        (tmp_path / name).write_text(text)
        paths.append(tmp_path / name)
    official = run_driver(anchor_python(ANCHOR), "terminal_bench_official.py",
                          {"command": "solution", "paths": [str(p) for p in paths]})
    found: dict[str, list[str]] = {"terminal-bench/solution-yaml": [], "terminal-bench-lenient-solution-yaml": []}
    same = 0
    for path, theirs in zip(paths, official, strict=True):
        try:
            ours = {"commands": [dataclasses.asdict(k) for k in solution_keystrokes(path)]}
        except ValueError:
            ours = {"error": "ValueError"}
        if "error" in theirs and "error" not in ours:
            found["terminal-bench-lenient-solution-yaml"].append(path.name)
        elif ("error" in theirs) != ("error" in ours) or theirs.get("commands") != ours.get("commands"):
            found["terminal-bench/solution-yaml"].append(f"{path.name}: official {theirs}, ours {ours}")
        else:
            same += 1
    tally.record(ANCHOR, "solution.yaml files read", same, len(paths))
    check_divergences(found, allowed)


def test_the_registry_subset_selects_the_tasks_the_official_client_keeps(tmp_path, tally, allowed):
    """terminal-bench-core 0.1.1's registry row (tests/data/terminal_bench_registry), pointed at a local repository
    of its shape: `tb datasets download` (RegistryClient: clone, reset to the commit, prune to task_id_subset) vs
    the task ids `agentcompass list tasks terminal_bench` loads from the same commit."""
    repo = tmp_path / "terminal-bench"
    names = ["hello-world", "crack-7z-hash.easy", "crack-7z-hash", "path-tracing-reverse", "hello-world-2", "other"]
    for name in names:
        (repo / "tasks" / name).mkdir(parents=True)
        (repo / "tasks" / name / "task.yaml").write_text("instruction: x\ndifficulty: easy\n")
        (repo / "tasks" / name / "Dockerfile").write_text("FROM x\n")
    branch = "dataset/terminal-bench-core/v0.1.x"
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q", "-b", branch], cwd=repo, check=True)
    subprocess.run([*git, "add", "."], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "tasks"], cwd=repo, check=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()
    [row] = json.loads(REGISTRY.read_text())
    (tmp_path / "registry.json").write_text(json.dumps([{**row, "github_url": str(repo), "commit_hash": commit}]))
    python = anchor_python(ANCHOR)
    done = subprocess.run([str(python.parent / "tb"), "datasets", "download", "-d", "terminal-bench-core==0.1.1",
                           "--local-registry-path", str(tmp_path / "registry.json"), "--output-dir", str(tmp_path / "official")],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": ""})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    official = sorted(path.name for path in (tmp_path / "official").iterdir())
    overlay = tmp_path / "source.yaml"
    overlay.write_text(f"benchmark:\n  source: {{git: 'file://{repo}', ref: {commit}, subdir: tasks}}\n")
    ours = run_cli("list", "tasks", "terminal_bench", "--config", str(overlay), "--json",
                   env={"AGENTCOMPASS_CACHE_DIR": str(tmp_path / "cache")})
    assert ours.returncode == 0, ours.stderr
    mine = sorted(json.loads(ours.stdout)["ids"])
    assert official == ["crack-7z-hash", "crack-7z-hash.easy", "hello-world", "path-tracing-reverse"]
    found = {"terminal-bench/registry-subset": [] if official == mine else [f"official {official}, ours {mine}"]}
    tally.record(ANCHOR, "registry task selections", int(official == mine), 1)
    check_divergences(found, allowed)
