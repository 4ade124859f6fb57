#!/bin/bash
# Verifier for top-ips-access-log.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
cd /app || exit 0

echo "== checking /app/top_ips.txt"
if python3 /tests/check_top_ips.py; then
    echo "all checks passed"
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
