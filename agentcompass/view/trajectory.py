"""An attempt's trajectory as steps, read from whatever its harness wrote, one small adapter each.

A step is one model turn: what the model said (`text`), its reasoning (`reasoning`, shown
collapsed), the commands or tool calls it made, each with its output and exit code; and, where
the run kept `model_calls.jsonl` (one line per model call, in order), that call's tokens, cost and
time. An attempt with no known trajectory file has no steps; its raw logs are still shown."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from agentcompass.core.safe_files import contained

OUTPUT_CHARS = 20_000  # per command output on the page; the file keeps all of it


def clip(text: Any) -> str:
    text = text if isinstance(text, str) else json.dumps(text, indent=1) if text is not None else ""
    return text if len(text) <= OUTPUT_CHARS else text[:OUTPUT_CHARS] + f"\n[... {len(text) - OUTPUT_CHARS} more characters in the file]"


def step(text: str = "", reasoning: str = "") -> dict[str, Any]:
    return {"text": text or "", "reasoning": reasoning or "", "actions": []}


def action(command: str, output: Any = "", exit_code: Any = None, tool: str = "bash") -> dict[str, Any]:
    return {"tool": tool, "command": command, "output": clip(output), "exit_code": exit_code}


def json_lines(path: Path) -> list[dict[str, Any]]:
    rows = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(c.get("text", "")) for c in content if isinstance(c, dict) and c.get("type") in ("text", None))
    return ""


def mini_swe_agent(directory: Path) -> list[dict[str, Any]] | None:
    """mini-swe-agent's `<task>.traj.json`: assistant messages with tool calls, then tool messages."""
    found = [p for p in sorted(directory.glob("*.traj.json")) if contained(directory, p)]
    if not found:
        return None
    try:
        messages = json.loads(found[0].read_text(encoding="utf-8")).get("messages") or []
    except (OSError, ValueError, AttributeError):
        return None
    steps: list[dict[str, Any]] = []
    pending: dict[str, dict[str, Any]] = {}
    for message in messages:
        role = message.get("role")
        if role == "assistant":
            current = step(text_of(message.get("content")), str(message.get("reasoning_content") or ""))
            for call in message.get("tool_calls") or []:
                try:
                    command = json.loads(call["function"]["arguments"]).get("command", "")
                except (KeyError, TypeError, ValueError, AttributeError):
                    command = str((call.get("function") or {}).get("arguments", ""))
                current["actions"].append(pending.setdefault(call.get("id", ""), action(command)))
            steps.append(current)
        elif role == "tool" and message.get("tool_call_id") in pending:
            extra = message.get("extra") or {}
            done = pending.pop(message["tool_call_id"])
            done["output"] = clip(extra.get("raw_output", message.get("content")))
            done["exit_code"] = extra.get("returncode")
        elif role == "exit" and steps:  # mini's closing message: why the agent stopped
            steps[-1]["text"] += ("\n\n" if steps[-1]["text"] else "") + f"[exit] {text_of(message.get('content'))}"
    return steps


def claude_code(directory: Path) -> list[dict[str, Any]] | None:
    """Claude Code's stream-json events: assistant messages with tool_use blocks, user messages with tool_result."""
    path = contained(directory, directory / "claude_code.jsonl")
    if path is None:
        return None
    steps: list[dict[str, Any]] = []
    pending: dict[str, dict[str, Any]] = {}
    for event in json_lines(path):
        message = event.get("message") or {}
        blocks = message.get("content") if isinstance(message.get("content"), list) else []
        if event.get("type") == "assistant":
            current = step()
            for block in blocks:
                kind = block.get("type")
                if kind == "text":
                    current["text"] += block.get("text", "")
                elif kind == "thinking":
                    current["reasoning"] += block.get("thinking", "")
                elif kind == "tool_use":
                    tool_input = block.get("input") or {}
                    current["actions"].append(pending.setdefault(block.get("id", ""), action(
                        tool_input.get("command") or json.dumps(tool_input), tool=block.get("name", "tool"))))
            steps.append(current)
        elif event.get("type") == "user":
            for block in blocks:
                if block.get("type") == "tool_result" and block.get("tool_use_id") in pending:
                    done = pending.pop(block["tool_use_id"])
                    done["output"] = clip(text_of(block.get("content")))
                    done["exit_code"] = 1 if block.get("is_error") else 0
    return steps


def opencode(directory: Path) -> list[dict[str, Any]] | None:
    """opencode's `run --format json` events: text and tool_use parts, a step_finish closing each turn."""
    path = contained(directory, directory / "opencode.jsonl")
    if path is None:
        return None
    steps: list[dict[str, Any]] = [step()]
    for event in json_lines(path):
        part = event.get("part") or {}
        kind = event.get("type")
        if kind == "text":
            steps[-1]["text"] += part.get("text", "")
        elif kind == "reasoning":
            steps[-1]["reasoning"] += part.get("text", "")
        elif kind == "tool_use":
            state = part.get("state") or {}
            tool_input = state.get("input") or {}
            metadata = state.get("metadata") or {}
            steps[-1]["actions"].append(action(tool_input.get("command") or json.dumps(tool_input), state.get("output", ""),
                                               metadata.get("exit"), tool=part.get("tool", "tool")))
        elif kind == "step_finish":
            steps.append(step())
    return [s for s in steps if s["text"] or s["reasoning"] or s["actions"]]


def codex(directory: Path) -> list[dict[str, Any]] | None:
    """codex's `exec --json` events: completed items (agent messages, reasoning, command executions) per turn."""
    path = contained(directory, directory / "codex.jsonl")
    if path is None:
        return None
    steps: list[dict[str, Any]] = [step()]
    for event in json_lines(path):
        item = event.get("item") or {}
        if event.get("type") == "item.completed":
            kind = item.get("type")
            if kind == "agent_message":
                steps[-1]["text"] += item.get("text", "")
            elif kind == "reasoning":
                steps[-1]["reasoning"] += item.get("text", "")
            elif kind == "command_execution":
                steps[-1]["actions"].append(action(item.get("command", ""), item.get("aggregated_output", ""),
                                                   item.get("exit_code")))
                steps.append(step())  # codex makes one model call per command it runs
            elif kind == "file_change":
                paths = ", ".join(f"{c.get('kind', 'edit')} {c.get('path', '')}" for c in item.get("changes") or [])
                steps[-1]["actions"].append(action(paths, item.get("status", ""), tool="apply_patch"))
                steps.append(step())
        elif event.get("type") == "turn.completed":
            steps.append(step())
    return [s for s in steps if s["text"] or s["reasoning"] or s["actions"]]


ADAPTERS: dict[str, Callable[[Path], list[dict[str, Any]] | None]] = {
    "mini_swe_agent": mini_swe_agent, "claude_code": claude_code, "opencode": opencode, "codex": codex,
}


def steps_of(directory: Path, harness: str | None) -> list[dict[str, Any]]:
    """The attempt's steps by its harness's adapter (any adapter that finds its file, for an unknown
    harness), each with its model call's tokens, cost and time where model_calls.jsonl has them."""
    adapters = [ADAPTERS[harness]] if harness in ADAPTERS else list(ADAPTERS.values())
    steps: list[dict[str, Any]] = []
    for adapter in adapters:
        found = adapter(directory)
        if found:
            steps = found
            break
    calls_file = contained(directory, directory / "model_calls.jsonl")  # no link out of the attempt is followed
    calls = json_lines(calls_file) if calls_file is not None else []
    calls = [c for c in calls if c.get("status", "ok") == "ok"]
    for number, (item, call) in enumerate(zip(steps, calls + [None] * max(0, len(steps) - len(calls)))):
        item["number"] = number + 1
        item["call"] = None if call is None else {
            "tokens_in": call.get("tokens_in"), "tokens_out": call.get("tokens_out"),
            "tokens_cached": call.get("tokens_cached"), "cost_usd": call.get("cost_usd"),
            "duration_s": call.get("duration_s")}
    return steps


def first_divergence(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> int | None:
    """The number of the first step where two trajectories ran different commands, or None when one
    is a prefix of the other with the same commands (they diverge only in length then: the shorter's end + 1)."""
    for number, (x, y) in enumerate(zip(a, b), start=1):
        if [c["command"] for c in x["actions"]] != [c["command"] for c in y["actions"]]:
            return number
    return None if len(a) == len(b) else min(len(a), len(b)) + 1
