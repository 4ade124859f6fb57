"""Peak and average concurrency of a setup's attempts, against hand-counted windows."""

from __future__ import annotations

import pytest

from agentcompass.report.concurrency import concurrency


def test_no_window_has_no_average():
    assert concurrency([]) == (0, None)
    assert concurrency([(5.0, 5.0)]) == (0, None)  # an attempt that took no time never ran beside another


def test_touching_windows_do_not_overlap():
    assert concurrency([(0, 10), (10, 20)]) == (1, 1.0)


def test_overlap_and_an_idle_gap():
    # 0-10: one attempt; 5-10: two; 10-20: one; 20-30 nothing runs (not counted); 30-40: three at once.
    # attempt-seconds 10 + 15 + 30 = 55 over 30 busy seconds.
    windows = [(0, 10), (5, 20), (30, 40), (30, 40), (30, 40)]
    peak, average = concurrency(windows)
    assert peak == 3 and average == pytest.approx(55 / 30, abs=0.01)
