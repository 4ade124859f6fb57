#!/bin/bash
# Reference solution: count client IPs (first field), skipping /health requests.
set -e
cd /app
python3 - <<'PY'
from collections import Counter

counts = Counter()
with open("/app/access.log") as fh:
    for line in fh:
        if not line.strip():
            continue
        ip = line.split()[0]
        try:
            request = line.split('"')[1]          # e.g. GET /path?x=1 HTTP/1.1
            path = request.split()[1].split("?")[0]
        except IndexError:
            path = ""
        if path == "/health":
            continue
        counts[ip] += 1

top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
with open("/app/top_ips.txt", "w") as out:
    for ip, n in top:
        out.write(f"{n} {ip}\n")
PY
cat top_ips.txt
