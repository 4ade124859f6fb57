"""The test suite's wall time and where it goes, from a JUnit XML report of one run.

    python -m pytest -q --run-conformance -n 4 --dist loadscope --junitxml=/tmp/suite.xml  # (scripts/test.sh's flags)
    python benchmarks/suite_time.py /tmp/suite.xml [--slowest 10] [--write-module-seconds]

Prints the run's totals (tests, failures, the sum of test times, the wall time pytest reported), the slowest
tests and the slowest modules (the sum of their tests' times: under `--dist loadscope` a module is one
worker's, so the slowest module bounds the run from below). `--write-module-seconds` writes those module
sums to tests/module_seconds.json, which tests/conftest.py reads to hand the slowest modules out first.
"""

from __future__ import annotations

import argparse
import json
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODULE_SECONDS = REPO / "tests" / "module_seconds.json"


def module_of(case: ET.Element) -> str:
    """tests/test_x.py from a testcase's classname (tests.test_x or tests.test_x.TestClass)."""
    parts = case.get("classname", "").split(".")
    while parts and not parts[-1].startswith("test_"):
        parts.pop()
    return "/".join(parts) + ".py"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("junit", type=Path)
    parser.add_argument("--slowest", type=int, default=10)
    parser.add_argument("--write-module-seconds", action="store_true")
    args = parser.parse_args()
    root = ET.parse(args.junit).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    cases = list(suite.iter("testcase"))
    times = [(float(c.get("time", 0)), f"{module_of(c)}::{c.get('name')}") for c in cases]
    per_module: dict[str, float] = defaultdict(float)
    for case, (seconds, _) in zip(cases, times):
        per_module[module_of(case)] += seconds
    total = sum(t for t, _ in times)
    print(f"{suite.get('tests')} tests, {suite.get('failures')} failed, {suite.get('errors')} errors, "
          f"{suite.get('skipped')} skipped; wall {float(suite.get('time', 0)):.0f} s; sum of test times {total:.0f} s")
    print(f"\nslowest {args.slowest} tests:")
    for seconds, name in sorted(times, reverse=True)[:args.slowest]:
        print(f"  {seconds:7.1f} s  {name}")
    print(f"\nslowest {args.slowest} modules (sum of their tests):")
    for name, seconds in sorted(per_module.items(), key=lambda kv: -kv[1])[:args.slowest]:
        print(f"  {seconds:7.1f} s  {name}")
    if args.write_module_seconds:
        ranked = dict(sorted(((k, round(v, 1)) for k, v in per_module.items()), key=lambda kv: -kv[1]))
        MODULE_SECONDS.write_text(json.dumps(ranked, indent=1) + "\n")
        print(f"\nwrote {MODULE_SECONDS.relative_to(REPO)}")


if __name__ == "__main__":
    main()
