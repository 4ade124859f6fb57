"""report/stats.py: bootstrap intervals over tasks and paired differences, against figures worked
out by hand or from the normal approximation (never from the code under test)."""

from __future__ import annotations

import math
import random
from decimal import Decimal

import pytest

from agentcompass.report.stats import METHOD, RESAMPLES, TaskTally, analyse


def tallies(outcomes: str, cost: str | None = "1.00") -> list[TaskTally]:
    """One task per letter: p passed, f failed, e an infrastructure error (no verdict); k = 1."""
    return [TaskTally(f"t{i:03d}", 1, int(o != "e"), int(o == "p"), None if cost is None else Decimal(cost))
            for i, o in enumerate(outcomes)]


def normal_interval(p: float, n: int) -> tuple[float, float]:
    half = 1.959964 * math.sqrt(p * (1 - p) / n)
    return p - half, p + half


def test_the_method_and_number_of_resamples_are_stated():
    assert METHOD["resamples"] == RESAMPLES >= 1000 and METHOD["confidence"] == 0.95 and "bootstrap over tasks" in METHOD["method"]


def test_a_setup_that_passes_everything_still_has_an_interval_for_its_rates():
    # 20 of 20, Wilson by hand: centre 1.096037 / 1.192073 = 0.919437, half 1.644165 x 0.048999 = 0.080563
    result = analyse({"all": tallies("p" * 20, "0.50")})["setups"]["all"]
    assert result["pass_at_1"] == result["solved_rate"] == {"low": pytest.approx(0.838874, abs=2e-6), "high": 1.0}
    assert result["cost_per_solved_usd"] == {"low": "0.500000", "high": "0.500000"}  # each task $0.50, each solved


def test_half_of_100_tasks_is_about_the_normal_interval():
    # 50 of 100: p +- 1.96 sqrt(.25/100) = [0.402, 0.598]; a bootstrap of 2000 lands within 0.02 of it.
    result = analyse({"half": tallies("pf" * 50)})["setups"]["half"]
    low, high = normal_interval(0.5, 100)
    assert result["pass_at_1"]["low"] == pytest.approx(low, abs=0.02)
    assert result["pass_at_1"]["high"] == pytest.approx(high, abs=0.02)
    # $1 per task, 50 solved: $2 per solved; a resample solving s of 100 costs 100/s, so the interval is
    # about 100/0.598/100 .. 100/0.402/100 = [1.67, 2.49].
    cost = result["cost_per_solved_usd"]
    assert float(cost["low"]) == pytest.approx(1 / high, abs=0.08) and float(cost["high"]) == pytest.approx(1 / low, abs=0.12)


def test_errors_are_kept_out_of_pass_at_1_but_not_of_the_solved_rate():
    # 10 tasks: 4 passed, 4 failed, 2 only errors. pass@1 = 4/8 on graded tasks; solved rate 4/10.
    result = analyse({"s": tallies("ppppffffee")})["setups"]["s"]
    assert result["pass_at_1"]["low"] < 0.5 < result["pass_at_1"]["high"] <= 1
    assert result["solved_rate"]["high"] < result["pass_at_1"]["high"]  # the errors count as unsolved


def test_about_95_percent_of_intervals_hold_the_true_rate():
    # 200 data sets of 60 tasks at a true rate of 0.3: a 95 % interval misses it ~10 times (binomial
    # spread of 200 draws and 400 resamples each: 0.85 to 0.99 is the band to expect).
    rng = random.Random(7)
    held = 0
    for _ in range(200):
        outcomes = "".join("p" if rng.random() < 0.3 else "f" for _ in range(60))
        bounds = analyse({"s": tallies(outcomes)}, resamples=400)["setups"]["s"]["pass_at_1"]
        held += bounds["low"] <= 0.3 <= bounds["high"]
    assert 0.85 * 200 <= held <= 0.99 * 200


def test_a_paired_difference_sees_what_two_separate_intervals_cannot():
    # Same 100 tasks: a and b agree on 90 (50 passed, 40 failed), b also solves the other 10.
    # Separately: a 0.50 [0.40, 0.60], b 0.60 [0.50, 0.70] overlap. Paired: b - a = 10/100 with
    # sd sqrt((0.10 - 0.01) / 100) = 0.03: about [0.041, 0.159], excluding 0.
    a = tallies("p" * 50 + "f" * 50)
    b = tallies("p" * 50 + "f" * 40 + "p" * 10)
    result = analyse({"a": a, "b": b})
    ia, ib = result["setups"]["a"]["pass_at_1"], result["setups"]["b"]["pass_at_1"]
    assert ib["low"] < ia["high"]  # the separate intervals overlap
    [pair] = result["pairs"]
    assert (pair["a"], pair["b"], pair["tasks"]) == ("a", "b", 100)
    diff = pair["pass_at_1"]
    assert diff["diff"] == pytest.approx(-0.10)  # a - b
    assert diff["low"] == pytest.approx(-0.159, abs=0.02) and diff["high"] == pytest.approx(-0.041, abs=0.02)
    assert diff["differs"] is True
    assert pair["solved_rate"]["differs"] is True
    # $1 a task each: a $100/50 = $2.00 per solved, b $100/60 = $1.67; a - b = $0.33.
    assert pair["cost_per_solved_usd"]["diff"] == "0.333333" and pair["cost_per_solved_usd"]["differs"] is True


def test_two_setups_that_agree_on_every_task_do_not_differ():
    [pair] = analyse({"a": tallies("pf" * 20), "b": tallies("pf" * 20)})["pairs"]
    assert pair["pass_at_1"] == {"diff": 0.0, "low": 0.0, "high": 0.0, "differs": False}


def test_only_setups_run_on_the_same_tasks_are_paired():
    result = analyse({"a": tallies("pf" * 5), "b": tallies("pf" * 6), "c": tallies("fp" * 5)})
    assert [(p["a"], p["b"]) for p in result["pairs"]] == [("a", "c")]


def test_an_unknown_cost_has_no_interval_and_few_solves_leave_it_unbounded():
    result = analyse({"unknown": tallies("pfff", cost=None), "rare": tallies("p" + "f" * 9)})["setups"]
    assert result["unknown"]["cost_per_solved_usd"] == {"low": None, "high": None}
    # 1 solved of 10: a resample draws no solved task with probability 0.9^10 = 35 % > 2.5 %.
    assert result["rare"]["cost_per_solved_usd"]["high"] is None and result["rare"]["cost_per_solved_usd"]["low"] is not None


def test_seeded_and_independent_of_the_other_setups():
    alone = analyse({"s": tallies("ppfpf" * 8)})["setups"]["s"]
    again = analyse({"x": tallies("f" * 40), "s": tallies("ppfpf" * 8)})["setups"]["s"]
    assert alone == again


def test_a_cost_no_task_holds_is_added_to_every_resample():
    # 10 tasks at $1, 5 solved: $2 per solved; with $10 of interrupted attempts besides, (10 + 10) / 5 = $4.
    # Each resample adds the $10 whole: a resample solving s of 10 costs (10 + 10) / s.
    plain = analyse({"s": tallies("pf" * 5)})["setups"]["s"]["cost_per_solved_usd"]
    extra = analyse({"s": tallies("pf" * 5)}, {"s": Decimal(10)})["setups"]["s"]["cost_per_solved_usd"]
    assert float(plain["low"]) <= 2 <= float(plain["high"])
    assert float(extra["low"]) <= 4 <= float(extra["high"])
    # On the same draws every resample costs $10 more for as many solved: the bounds are (10 + x) / s, not x / s.
    assert float(extra["low"]) == pytest.approx(2 * float(plain["low"]), abs=1e-6)
    unknown = analyse({"s": tallies("pf" * 5)}, {"s": None})["setups"]["s"]["cost_per_solved_usd"]
    assert unknown == {"low": None, "high": None}


# Wilson 95 % intervals worked by hand from the formula (z = 1.959964):
#   centre = (p + z²/2n) / (1 + z²/n), half = z / (1 + z²/n) * sqrt(p(1-p)/n + z²/4n²)
#   6/6:  z²/n = 0.640253, centre 0.804834, half 0.195166  -> 0.609668 .. 1
#   0/6:  centre 0.195166, half 0.195166                   -> 0 .. 0.390334
#   3/10: z²/n = 0.384146, centre 0.355507, half 0.247715  -> 0.107791 .. 0.603222
@pytest.mark.parametrize("passed, n, low, high", [(6, 6, 0.609668, 1.0), (0, 6, 0.0, 0.390334), (3, 10, 0.107791, 0.603222)])
def test_rates_have_wilson_intervals_that_do_not_collapse_at_0_and_100_percent(passed, n, low, high):
    from agentcompass.report.stats import TaskTally, analyse

    tallies = [TaskTally(f"t{i}", 1, 1, int(i < passed), Decimal(1)) for i in range(n)]
    found = analyse({"s": tallies})["setups"]["s"]
    for figure in ("pass_at_1", "solved_rate"):
        assert found[figure]["low"] == pytest.approx(low, abs=2e-6), figure
        assert found[figure]["high"] == pytest.approx(high, abs=2e-6), figure
