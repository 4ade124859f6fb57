"""Harbor's own task models against ours: fails when Harbor has a task.toml field agentcompass does not know,
so the next schema release cannot slip by silently (an unknown key refuses a task: it would be noticed, but
only by the users of the first dataset that uses it).

Harbor (>= 3.12) runs in a side venv at the pinned version (tests/sidevenv.py); scripts/harbor_schema_table.py
walks its pydantic models there. Without the venv (no Python 3.12, no package index) this skips on a developer
machine and fails in CI, as the docker tests do.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

from sidevenv import side_venv  # noqa: E402

from agentcompass.formats.harbor.fields import handling  # noqa: E402
from agentcompass.formats.harbor.schema import CollectHook, TaskConfig  # noqa: E402
from agentcompass.formats.harbor.task import DEFAULT_AGENT_TIMEOUT, DEFAULT_VERIFY_TIMEOUT  # noqa: E402


def load_script():
    spec = importlib.util.spec_from_file_location("harbor_schema_table", REPO / "scripts" / "harbor_schema_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SCRIPT = load_script()


@pytest.fixture(scope="module")
def harbor_fields() -> dict[str, dict]:
    try:
        python = side_venv("harbor", "3.12", [SCRIPT.HARBOR])
        rows = SCRIPT.harbor_rows(str(python))
    except (FileNotFoundError, RuntimeError, subprocess.CalledProcessError) as exc:
        reason = f"no side venv with {SCRIPT.HARBOR}: {str(exc)[-300:]}"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run this test, but: {reason}")
        pytest.skip(reason)
    return {row["path"]: row for row in rows}


def test_every_harbor_field_is_known_to_ours(harbor_fields):
    ours = {row["path"] for row in SCRIPT.walk(TaskConfig)}
    missing = sorted(path for path in harbor_fields if path not in ours)
    assert not missing, f"Harbor {SCRIPT.HARBOR} has task.toml fields agentcompass does not know: {missing}"
    assert len(harbor_fields) > 100  # the walk reached the nested tables (steps' verifier environments too)


def test_every_harbor_field_says_how_it_is_treated(harbor_fields):
    assert [path for path in harbor_fields if handling(path) is None] == []


def test_defaults_that_change_a_trial_are_harbors(harbor_fields):
    """What an omitted field means: no agent timeout, a 600 s verifier, a collect hook's service and timeout."""
    assert harbor_fields["agent.timeout_sec"]["default"] == "null" and DEFAULT_AGENT_TIMEOUT is None
    assert float(harbor_fields["verifier.timeout_sec"]["default"]) == DEFAULT_VERIFY_TIMEOUT
    hook = CollectHook(command="true")
    assert harbor_fields["verifier.collect[].service"]["default"] == hook.service
    assert float(harbor_fields["verifier.collect[].timeout_sec"]["default"]) == hook.timeout_sec


def test_the_docs_table_is_the_one_harbor_gives(harbor_fields):
    """docs/formats/harbor-schema.md is regenerated, never hand-edited: `python scripts/harbor_schema_table.py`."""
    page = REPO / "docs" / "formats" / "harbor-schema.md"
    assert page.read_text() == SCRIPT.table(list(harbor_fields.values())), \
        "docs/formats/harbor-schema.md is stale: python scripts/harbor_schema_table.py > docs/formats/harbor-schema.md"
