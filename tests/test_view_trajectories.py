"""The viewer's trajectory adapters on each harness's own file shapes: mini-swe-agent's .traj.json as the real
mini writes it (from a run made here), and the CLIs' JSON events in the shapes their harnesses parse."""

from __future__ import annotations

import json
from pathlib import Path

from agentcompass.view.trajectory import first_divergence, steps_of


def write_events(directory: Path, name: str, events: list[dict]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text("".join(json.dumps(e) + "\n" for e in events) + "not json: a stray line\n")
    return directory


def test_claude_code_stream_json_pairs_each_tool_use_with_its_result(tmp_path):
    directory = write_events(tmp_path, "claude_code.jsonl", [
        {"type": "system", "subtype": "init", "tools": ["Bash"]},
        {"type": "assistant", "message": {"content": [
            {"type": "thinking", "thinking": "the median is off by one"},
            {"type": "text", "text": "Let me run the tests."},
            {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "python3 -m unittest"}}]}},
        {"type": "user", "message": {"content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "FAILED (failures=1)"}],
             "is_error": True}]}},
        {"type": "assistant", "message": {"content": [{"type": "text", "text": "Fixed."}]}},
        {"type": "result", "subtype": "success", "total_cost_usd": 0.01},
    ])
    steps = steps_of(directory, "claude_code")
    assert [s["text"] for s in steps] == ["Let me run the tests.", "Fixed."]
    assert steps[0]["reasoning"] == "the median is off by one"
    assert steps[0]["actions"] == [{"tool": "Bash", "command": "python3 -m unittest", "output": "FAILED (failures=1)",
                                    "exit_code": 1}]


def test_opencode_events_make_one_step_per_finished_model_step(tmp_path):
    directory = write_events(tmp_path, "opencode.jsonl", [
        {"type": "step_start", "part": {}},
        {"type": "tool_use", "part": {"tool": "bash", "state": {"status": "completed", "input": {"command": "ls"},
                                                                  "output": "stats.py\n", "metadata": {"exit": 0}}}},
        {"type": "step_finish", "part": {"tokens": {"input": 10, "output": 2}, "cost": 0}},
        {"type": "text", "part": {"text": "done"}},
        {"type": "step_finish", "part": {"tokens": {"input": 12, "output": 1}, "cost": 0}},
    ])
    steps = steps_of(directory, "opencode")
    assert [[a["command"] for a in s["actions"]] for s in steps] == [["ls"], []]
    assert steps[0]["actions"][0]["output"] == "stats.py\n" and steps[1]["text"] == "done"


def test_codex_items_make_one_step_per_command_and_show_file_changes(tmp_path):
    directory = write_events(tmp_path, "codex.jsonl", [
        {"type": "thread.started", "thread_id": "t"},
        {"type": "item.completed", "item": {"type": "reasoning", "text": "look first"}},
        {"type": "item.completed", "item": {"type": "command_execution", "command": "bash -lc ls",
                                            "aggregated_output": "stats.py\n", "exit_code": 0}},
        {"type": "item.completed", "item": {"type": "file_change", "changes": [{"path": "stats.py", "kind": "update"}],
                                            "status": "completed"}},
        {"type": "item.completed", "item": {"type": "agent_message", "text": "fixed"}},
        {"type": "turn.completed", "usage": {"input_tokens": 10, "output_tokens": 3}},
    ])
    steps = steps_of(directory, "codex")
    assert [[a["command"] for a in s["actions"]] for s in steps] == [["bash -lc ls"], ["update stats.py"], []]
    assert steps[0]["reasoning"] == "look first" and steps[2]["text"] == "fixed"


def test_model_calls_give_each_step_its_tokens_cost_and_time_in_order(tmp_path):
    directory = write_events(tmp_path, "opencode.jsonl", [
        {"type": "text", "part": {"text": "one"}}, {"type": "step_finish", "part": {}},
        {"type": "text", "part": {"text": "two"}}, {"type": "step_finish", "part": {}}])
    calls = [{"status": "error", "tokens_in": 0}, {"status": "ok", "tokens_in": 100, "tokens_out": 5, "cost_usd": 0.5,
                                                    "duration_s": 1.5},
             {"status": "ok", "tokens_in": 200, "tokens_out": 6, "cost_usd": 0.25, "duration_s": 2.0}]
    (directory / "model_calls.jsonl").write_text("".join(json.dumps(c) + "\n" for c in calls))
    steps = steps_of(directory, "opencode")
    assert [(s["number"], s["call"]["tokens_in"], s["call"]["cost_usd"]) for s in steps] == [(1, 100, 0.5), (2, 200, 0.25)]


def test_a_harness_without_a_trajectory_file_has_no_steps(tmp_path):
    (tmp_path / "agent.log").write_text("hello\n")
    assert steps_of(tmp_path, "oracle") == []


def test_first_divergence_counts_steps_from_one():
    def steps(*commands: str) -> list[dict]:
        return [{"actions": [{"command": c}]} for c in commands]

    assert first_divergence(steps("a", "b"), steps("a", "c")) == 2
    assert first_divergence(steps("a", "b"), steps("a", "b")) is None
    assert first_divergence(steps("a"), steps("a", "b")) == 2
