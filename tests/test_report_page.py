"""report.html in headless Chromium: it opens with no network, every chart is drawn, the tables
hold the setups and their figures; the screenshot is kept in test-artifacts/ (or $TEST_ARTIFACTS_DIR)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import headless_chromium
from conftest import REPO, skip_or_fail
from test_report import sweep  # noqa: F401  (the fixture)

PROBE = """(() => {
  const charts = {};
  for (const id of ["chart-success-vs-cost", "chart-cost-and-success", "chart-task-heatmap"]) {
    const div = document.getElementById(id);
    charts[id] = div === null ? null : {
      svgs: div.querySelectorAll(".main-svg").length,
      traces: (div.data || []).length,
      marks: div.querySelectorAll(".point, .bars path, .heatmaplayer image, .hm image").length,
      height: div.getBoundingClientRect().height,
    };
  }
  const text = id => (document.getElementById(id) || {}).innerText || "";
  return {charts, setups: text("table-setups"), difficulty: text("table-difficulty"), plotly: typeof Plotly};
})()"""


@pytest.fixture(scope="module")
def browser() -> None:
    if headless_chromium.chromium() is None:
        skip_or_fail("no chromium (apt-get install chromium)")


def test_the_page_opens_offline_with_every_chart_drawn_and_the_setups_in_its_tables(browser, cli, sweep):  # noqa: F811
    proc = cli("report", str(sweep), "--hourly-usd", "36")
    assert proc.returncode == 0, proc.stderr
    page = sweep / "report" / "report.html"
    seen = headless_chromium.visit(page.resolve().as_uri(), PROBE)
    artifacts = Path(os.environ.get("TEST_ARTIFACTS_DIR") or REPO / "test-artifacts")
    artifacts.mkdir(parents=True, exist_ok=True)
    (artifacts / "report.png").write_bytes(seen.screenshot)
    assert seen.requests and headless_chromium.external(seen.requests) == [], seen.requests
    assert seen.failed == [] and seen.errors == []
    assert seen.result["plotly"] == "object"
    for chart_id, chart in seen.result["charts"].items():
        assert chart is not None, f"{chart_id} missing"
        assert chart["svgs"] >= 1 and chart["traces"] >= 1 and chart["marks"] >= 1 and chart["height"] > 200, (chart_id, chart)
    for name in ("demo__mini__glm__local__none", "demo__mini__glm__local__high", "demo__mini__gpt__local",
                 "demo__mini__mystery__local"):
        assert name in seen.result["setups"] and name in seen.result["difficulty"]
    # The figures: none's total $0.15 (hand-computed in test_report.sweep), the unpriced model's cost unknown.
    none_row = next(line for line in seen.result["setups"].splitlines() if line.startswith("demo__mini__glm__local__none"))
    assert "0.150000" in none_row
    mystery_row = next(line for line in seen.result["setups"].splitlines() if line.startswith("demo__mini__mystery__local"))
    assert "unknown" in mystery_row
    assert len(seen.screenshot) > 10_000
