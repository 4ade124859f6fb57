#!/bin/bash
# Verifier for implement-duration-parser: hidden unit tests for /app/durations.py.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
cd /app || exit 0

echo "== running hidden unit tests against /app/durations.py"
if python3 /tests/test_durations.py; then
    echo "all checks passed"
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
