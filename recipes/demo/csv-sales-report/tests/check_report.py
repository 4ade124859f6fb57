"""Checks /app/report.json against totals computed from a pristine copy of sales.csv."""
import csv
import json
import sys
from decimal import Decimal

ok = True


def check(cond, msg):
    global ok
    print(("PASS: " if cond else "FAIL: ") + msg)
    if not cond:
        ok = False


agg = {}
with open("/tests/sales.csv", newline="") as fh:
    for row in csv.DictReader(fh):
        if not row["units"].strip():
            continue
        region = row["region"].strip()
        a = agg.setdefault(region, {"orders": 0, "units": 0, "revenue": Decimal(0)})
        a["orders"] += 1
        a["units"] += int(row["units"])
        a["revenue"] += int(row["units"]) * Decimal(row["unit_price"])
expected = sorted(agg.items(), key=lambda kv: kv[1]["revenue"], reverse=True)
expected_total = sum(v["revenue"] for v in agg.values())

try:
    with open("/app/report.json") as fh:
        report = json.load(fh)
except Exception as exc:  # missing or invalid JSON
    print(f"FAIL: cannot read /app/report.json as JSON: {exc}")
    sys.exit(1)

check(isinstance(report, dict), "report is a JSON object")
if not ok:
    sys.exit(1)


def num(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


tr = report.get("total_revenue")
check(num(tr) and abs(tr - float(expected_total)) < 0.006,
      f"total_revenue == {expected_total} (got {tr!r})")

regions = report.get("regions")
check(isinstance(regions, list), "regions is a list")
if isinstance(regions, list):
    got_names = [r.get("region") if isinstance(r, dict) else None for r in regions]
    exp_names = [name for name, _ in expected]
    check(got_names == exp_names,
          f"regions sorted by revenue desc: expected {exp_names}, got {got_names}")
    by_name = {r.get("region"): r for r in regions if isinstance(r, dict)}
    for name, v in expected:
        r = by_name.get(name)
        if r is None:
            continue
        check(num(r.get("orders")) and r.get("orders") == v["orders"],
              f"{name}: orders == {v['orders']} (got {r.get('orders')!r})")
        check(num(r.get("units")) and r.get("units") == v["units"],
              f"{name}: units == {v['units']} (got {r.get('units')!r})")
        rev = r.get("revenue")
        check(num(rev) and abs(rev - float(v["revenue"])) < 0.006,
              f"{name}: revenue == {v['revenue']} (got {rev!r})")

sys.exit(0 if ok else 1)
