#!/bin/bash
cat > /app/sum.py <<'PY'
import sys

print(sum(int(line) for line in sys.stdin if line.strip()))
PY
