#!/bin/bash
# Reference solution: the even-length branch must average data[mid - 1] and data[mid].
set -e
cd /app
python3 - <<'PY'
from pathlib import Path

path = Path("/app/stats.py")
src = path.read_text()
old = "return (data[mid] + data[mid + 1]) / 2"
new = "return (data[mid - 1] + data[mid]) / 2"
assert old in src, "expected buggy line not found"
path.write_text(src.replace(old, new))
PY
python3 -m unittest test_stats
