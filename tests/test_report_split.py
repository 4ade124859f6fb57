"""The bill split against hand-computed figures (issue 11's Tests section)."""

from decimal import Decimal

from agentcompass.report.split import Bucket, split_bill, split_hourly

D = Decimal


def test_two_trials_share_ten_seconds_then_one_is_alone_at_36_per_hour():
    # $36/h = $0.01/s. [0,10]: A and B share $0.10 -> $0.05 each; [10,20]: A alone, $0.10.
    split = split_hourly({"A": [(0, 10), (10, 20)], "B": [(0, 10)]}, 36)
    assert split.shares == {"A": D("0.15"), "B": D("0.05")}
    assert split.sole == {"A": D("0.20"), "B": D("0.10")}
    assert split.billed_usd == D("0.20")


def test_gaps_between_generation_intervals_cost_nothing_with_an_hourly_rate():
    # A: [0,5] and [20,25]; B: [3,8]. Union: [0,8] + [20,25] = 13 s = $0.13.
    # [0,3] A alone 0.03; [3,5] shared 0.01 each; [5,8] B alone 0.03; [20,25] A alone 0.05.
    split = split_hourly({"A": [(0, 5), (20, 25)], "B": [(3, 8)]}, 36)
    assert split.shares == {"A": D("0.09"), "B": D("0.04")}
    assert split.billed_usd == D("0.13")
    assert sum(split.shares.values()) == split.billed_usd


def test_rate_changes_between_billing_buckets():
    # Bucket 1 [0,100) costs $1.00; generation in it: A [0,40], B [20,60] -> union 60 s.
    #   [0,20] A alone 20 s; [20,40] shared 10 s each; [40,60] B alone 20 s.
    #   A: 30/60 * 1.00 = 0.50; B: 30/60 = 0.50.
    # Bucket 2 [100,200) costs $3.00; generation: A [150,160], B [150,170] -> union 20 s.
    #   [150,160] shared 5 s each; [160,170] B alone 10 s. A: 5/20*3 = 0.75; B: 15/20*3 = 2.25.
    buckets = [Bucket(0, 100, D("1.00")), Bucket(100, 200, D("3.00"))]
    split = split_bill({"A": [(0, 40), (150, 160)], "B": [(20, 60), (150, 170)]}, buckets)
    assert split.shares == {"A": D("1.25"), "B": D("2.75")}
    # Sole (rounded up): A 40 s at $1/60 per s + 10 s at $3/20 = 0.666667 + 1.50;
    # B 40 s at $1/60 + 20 s at $3/20 = 0.666667 + 3.00.
    assert split.sole == {"A": D("2.166667"), "B": D("3.666667")}
    assert sum(split.shares.values()) == D("4.00")
    assert split.unattributed_usd == 0


def test_an_interval_across_a_bucket_edge_is_priced_by_each_bucket():
    # A [50,150]: 50 s in bucket 1 (alone, $1.00) and 50 s in bucket 2 with B [100,150] ($2.00, shared).
    buckets = [Bucket(0, 100, D("1.00")), Bucket(100, 200, D("2.00"))]
    split = split_bill({"A": [(50, 150)], "B": [(100, 150)]}, buckets)
    assert split.shares == {"A": D("2.00"), "B": D("1.00")}


def test_idle_bucket_is_unattributed_and_totals_reconcile_to_the_cent():
    # Thirds that do not divide evenly: three trials share [0,10] of a $1.00 bucket.
    buckets = [Bucket(0, 3600, D("1.00")), Bucket(3600, 7200, D("0.40"))]
    split = split_bill({"A": [(0, 10)], "B": [(0, 10)], "C": [(0, 10)]}, buckets)
    assert sorted(split.shares.values()) == [D("0.333333"), D("0.333333"), D("0.333334")]
    assert sum(split.shares.values()) + split.unattributed_usd == split.billed_usd == D("1.40")
    assert split.unattributed_usd == D("0.40")


def test_generation_outside_the_bill_is_reported_uncovered():
    split = split_bill({"A": [(0, 10), (100, 130)]}, [Bucket(0, 50, D("0.50"))])
    assert split.shares == {"A": D("0.50")}
    assert split.uncovered_s == 30


def test_sole_is_never_below_the_split_and_shares_add_up_on_many_overlapping_trials():
    import random

    rng = random.Random(7)
    intervals = {}
    for trial in range(40):
        start = rng.uniform(0, 7000)
        intervals[trial] = [(start + i * 30, start + i * 30 + rng.uniform(1, 25)) for i in range(rng.randint(1, 6))]
    buckets = [Bucket(h * 3600, (h + 1) * 3600, D(str(round(rng.uniform(1, 9), 2)))) for h in range(3)]
    split = split_bill(intervals, buckets)
    assert sum(split.shares.values()) + split.unattributed_usd == split.billed_usd
    assert all(split.sole[t] >= split.shares[t] for t in intervals)
    hourly = split_hourly(intervals, 7.5)
    assert sum(hourly.shares.values()) == hourly.billed_usd
    assert all(hourly.sole[t] >= hourly.shares[t] for t in intervals)
