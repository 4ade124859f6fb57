"""One failure mode per attempt that did not pass, the same taxonomy whatever the harness or format
(docs/analyze.md). It keys on what every trial record holds (status, error_category, agent_exit_status,
message, usage) and on the attempt's steps and verifier log where the harness left them."""

from __future__ import annotations

import re
from typing import Any

# (mode, pattern on the trial's message): the first that matches wins, in this order.
MESSAGE_MODES: list[tuple[str, re.Pattern[str]]] = [
    ("context_limit", re.compile(r"context[ _-]?(window|length)|maximum context|too many tokens", re.I)),
    ("cost_limit", re.compile(r"cost[ _-]?limit|budget", re.I)),
    ("step_limit", re.compile(r"step[ _-]?limit|max(imum)?[ _-]?(steps|turns|iterations)", re.I)),
    ("time_limit", re.compile(r"time(d)?[ _-]?out|timeout|time limit|deadline", re.I)),
    ("model_error", re.compile(r"\bmodel\b|\bAPI\b|gateway|rate[ _-]?limit|\b(401|403|429|500|502|503)\b|provider", re.I)),
    ("environment", re.compile(r"build|image|No module named|ModuleNotFoundError|command not found|missing dependenc", re.I)),
]
EXIT_STATUS_MODES = {"limits_exceeded": "step_limit", "timeout": "time_limit", "context_window_exceeded": "context_limit",
                     "format_error": "tool_error", "cost_limit": "cost_limit"}
ENVIRONMENT_OUTPUT = re.compile(r"No module named|ModuleNotFoundError|command not found|cannot find -l|"
                                r"fatal error: \S+\.h: No such file|Could not find a version|error: could not compile")
LOOP_REPEATS = 4  # the same command this many times in a row: the agent was going round in circles
FAILED_TEST = [
    re.compile(r"^FAILED (\S+)", re.M),                             # pytest's short summary
    re.compile(r"^(?:FAIL|ERROR): (\S+ \([^)]*\))", re.M),          # unittest's headers
    re.compile(r"^(\S+ \([^)]*\)) \.\.\. (?:FAIL|ERROR)$", re.M),   # unittest -v lines
    re.compile(r"^--- FAIL: (\S+)", re.M),                          # go test
]
MAX_NAMED = 20


def failing_tests(verifier_log: str, report: dict[str, Any] | None = None) -> list[str]:
    """The tests the verifier names as failing: SWE-bench's report.json (FAIL_TO_PASS / PASS_TO_PASS
    failures) when there is one, else pytest, unittest or go test lines in its log."""
    names: list[str] = []
    for instance in (report or {}).values():
        status = instance.get("tests_status", {}) if isinstance(instance, dict) else {}
        for group in ("FAIL_TO_PASS", "PASS_TO_PASS"):
            names.extend(status.get(group, {}).get("failure", []))
    for pattern in FAILED_TEST if not names else []:
        names.extend(m.group(1) for m in pattern.finditer(verifier_log))
    return list(dict.fromkeys(names))[:MAX_NAMED]


def repeated_command(steps: list[dict[str, Any]]) -> tuple[str, int] | None:
    run, longest, last = 0, ("", 0), None
    for command in (str(a.get("command", "")) for s in steps for a in s.get("actions", [])):
        run = run + 1 if command == last and command else 1
        last = command
        if run > longest[1]:
            longest = (command, run)
    return longest if longest[1] >= LOOP_REPEATS else None


def by_message(message: str) -> str | None:
    return next((mode for mode, pattern in MESSAGE_MODES if pattern.search(message)), None)


def failure_mode(trial: dict[str, Any], steps: list[dict[str, Any]], verifier_log: str = "",
                 report: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """{"mode", "evidence", ["tests"]} for an attempt that did not pass; None for a pass."""
    if trial.get("status") == "passed":
        return None
    category, message = trial.get("error_category"), str(trial.get("message") or "")
    exit_status = str(trial.get("agent_exit_status") or "")
    usage = trial.get("usage") or {}
    if (trial.get("details") or {}).get("tampered"):
        return {"mode": "integrity_violation", "evidence": "; ".join(trial["details"]["tampered"])[:300]}
    if category == "infra":
        mode = "environment" if re.search(r"build", message, re.I) else "infra_error"
        return {"mode": mode, "evidence": message[:300]}
    if category == "verifier":
        return {"mode": "verifier_error", "evidence": message[:300]}
    if exit_status in EXIT_STATUS_MODES:
        return {"mode": EXIT_STATUS_MODES[exit_status], "evidence": f"agent_exit_status {exit_status}: {message[:200]}"}
    if category == "agent":
        mode = by_message(message) or ("model_error" if usage.get("model_errors") else "tool_error")
        return {"mode": mode, "evidence": message[:300]}
    loop = repeated_command(steps)
    if loop:
        return {"mode": "loop", "evidence": f"{loop[0][:200]!r} run {loop[1]} times in a row"}
    outputs = [(s.get("number"), a) for s in steps[-3:] for a in s.get("actions", [])]
    for number, done in outputs:
        found = ENVIRONMENT_OUTPUT.search(str(done.get("output", "")))
        if found:
            return {"mode": "environment", "evidence": f"step {number}: {found.group(0)} ({done.get('command', '')[:120]})"}
    if exit_status not in ("", "completed", "submitted") :
        return {"mode": "never_submitted", "evidence": f"agent_exit_status {exit_status}"}
    if not steps and not usage.get("model_calls") and not (trial.get("usage") or {}).get("tokens_out"):
        if usage.get("model_errors"):
            return {"mode": "model_error", "evidence": f"{usage['model_errors']} failed model call(s), none answered"}
        return {"mode": "no_actions", "evidence": "the agent made no model call and ran no command"}
    tests = failing_tests(verifier_log, report)
    evidence = f"{len(tests)} failing test(s): {', '.join(tests[:5])}" if tests else "the verifier's tests did not pass"
    return {"mode": "tests_failed", "evidence": evidence, "tests": tests}
