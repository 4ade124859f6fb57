"""Checks /app/top_ips.txt. Expected values were computed from the shipped access.log."""
import ipaddress
import sys

EXPECTED = [
    ("203.0.113.7", 23),
    ("198.51.100.23", 19),
    ("192.0.2.44", 16),
    ("203.0.113.150", 13),
    ("198.51.100.5", 11),
]

try:
    with open("/app/top_ips.txt") as fh:
        lines = [line.strip() for line in fh if line.strip()]
except OSError as exc:
    print(f"FAIL: cannot read /app/top_ips.txt: {exc}")
    sys.exit(1)

print("content of /app/top_ips.txt:")
for line in lines:
    print("   ", line)

got = []
for line in lines:
    ip = count = None
    for tok in line.replace(",", " ").replace(":", " ").split():
        if tok.isdigit() and count is None:
            count = int(tok)
            continue
        try:
            ipaddress.ip_address(tok)
            ip = tok
        except ValueError:
            pass
    got.append((ip, count))

ok = True
if len(got) != len(EXPECTED):
    print(f"FAIL: expected exactly {len(EXPECTED)} lines, got {len(got)}")
    ok = False
for i, want in enumerate(EXPECTED):
    have = got[i] if i < len(got) else None
    good = have == want
    ok &= good
    print(f"{'PASS' if good else 'FAIL'}: line {i + 1}: expected {want[1]} {want[0]}, got {have}")
sys.exit(0 if ok else 1)
