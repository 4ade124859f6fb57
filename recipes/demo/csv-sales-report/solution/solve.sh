#!/bin/bash
# Reference solution: aggregate with csv + Decimal, write report.json.
set -e
cd /app
python3 - <<'PY'
import csv
import json
from decimal import Decimal, ROUND_HALF_UP

agg = {}
with open("/app/sales.csv", newline="") as fh:
    for row in csv.DictReader(fh):
        if not row["units"].strip():
            continue  # cancelled order
        region = row["region"].strip()
        units = int(row["units"])
        a = agg.setdefault(region, {"orders": 0, "units": 0, "revenue": Decimal(0)})
        a["orders"] += 1
        a["units"] += units
        a["revenue"] += units * Decimal(row["unit_price"])


def money(d):
    return float(d.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))


regions = [
    {"region": name, "orders": v["orders"], "units": v["units"], "revenue": money(v["revenue"])}
    for name, v in sorted(agg.items(), key=lambda kv: kv[1]["revenue"], reverse=True)
]
report = {"total_revenue": money(sum(v["revenue"] for v in agg.values())), "regions": regions}
with open("/app/report.json", "w") as fh:
    json.dump(report, fh, indent=2)
    fh.write("\n")
PY
cat /app/report.json
