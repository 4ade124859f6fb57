"""Resuming across versions: a setting added since a run was recorded changes nothing while it is not set."""

from __future__ import annotations

from agentcompass.core.fingerprint import differences


def test_a_setting_added_since_the_run_at_its_null_default_is_no_difference():
    recorded = {"model.name": "m", "run.k": 1}
    current = {"model.name": "m", "run.k": 1, "model.max_output_tokens": None}
    assert differences(recorded, current) == []


def test_a_setting_added_since_the_run_with_a_value_is_a_difference():
    recorded = {"model.name": "m"}
    current = {"model.name": "m", "env.pids_limit": 4096}
    assert differences(recorded, current) == ["env.pids_limit: unset -> 4096"]
    assert differences({"model.name": "m", "model.max_output_tokens": 100}, {"model.name": "m"}) == [
        "model.max_output_tokens: 100 -> unset"]
