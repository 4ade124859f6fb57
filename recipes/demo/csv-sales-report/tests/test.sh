#!/bin/bash
# Verifier for csv-sales-report.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
cd /app || exit 0

echo "== checking /app/report.json"
if python3 /tests/check_report.py; then
    echo "all checks passed"
    echo 1 > /logs/verifier/reward.txt
else
    echo "report is missing or incorrect"
    echo 0 > /logs/verifier/reward.txt
fi
