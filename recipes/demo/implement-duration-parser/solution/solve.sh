#!/bin/bash
# Reference solution: replace the two stubs in /app/durations.py.
set -e
cd /app
python3 - <<'PY'
from pathlib import Path

path = Path("/app/durations.py")
src = path.read_text()

parse_impl = '''
    import re

    if not isinstance(text, str):
        raise TypeError("duration must be a string")
    s = text.strip()
    if not s:
        raise ValueError("empty duration")
    if s.isascii() and s.isdigit():
        return int(s)
    order = "wdhms"
    pos = 0
    last = -1
    total = 0
    group = re.compile(r"\\s*([0-9]+)([A-Za-z])")
    while pos < len(s):
        m = group.match(s, pos)
        if not m:
            raise ValueError(f"invalid duration: {text!r}")
        unit = m.group(2).lower()
        if unit not in UNITS:
            raise ValueError(f"unknown unit {m.group(2)!r} in {text!r}")
        idx = order.index(unit)
        if idx <= last:
            raise ValueError(f"unit {unit!r} repeated or out of order in {text!r}")
        last = idx
        total += int(m.group(1)) * UNITS[unit]
        pos = m.end()
    return total
'''

format_impl = '''
    if isinstance(seconds, bool) or not isinstance(seconds, int):
        raise TypeError("seconds must be an int")
    if seconds < 0:
        raise ValueError("seconds must not be negative")
    if seconds == 0:
        return "0s"
    parts = []
    for unit in "wdhms":
        n, seconds = divmod(seconds, UNITS[unit])
        if n:
            parts.append(f"{n}{unit}")
    return "".join(parts)
'''

stub = "    raise NotImplementedError\n"
assert src.count(stub) == 2, "expected two stubs"
first = src.index(stub)
src = src[:first] + parse_impl.lstrip("\n") + src[first + len(stub):]
second = src.index(stub)
src = src[:second] + format_impl.lstrip("\n") + src[second + len(stub):]
path.write_text(src)
PY
python3 scheduler.py
