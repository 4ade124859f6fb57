#!/bin/bash
# Verifier for fix-median-bug: runs hidden unit tests against /app/stats.py.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
cd /app || exit 0

echo "== checking /app/stats.py with hidden unit tests"
if python3 /tests/test_stats_hidden.py; then
    echo "PASS: all checks passed"
    echo 1 > /logs/verifier/reward.txt
else
    echo "FAIL: hidden unit tests failed"
    echo 0 > /logs/verifier/reward.txt
fi
