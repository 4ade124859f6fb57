#!/usr/bin/env bash
# The conformance suite against the official tools, and its per-anchor table into benchmarks/conformance.md.
set -euo pipefail
cd "$(dirname "$0")/.."
table="$(mktemp)"
trap 'rm -f "$table"' EXIT
AGENTCOMPASS_CONFORMANCE_TABLE="$table" python -m pytest -q tests/conformance --run-conformance "$@"
{
  echo "# Conformance: the last full run"
  echo
  echo "\`bash benchmarks/conformance.sh\` on $(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD)."
  echo "Each row: comparisons of agentcompass with the official tool, and how many were identical"
  echo "(the rest are deliberate differences listed in docs/deliberate-differences.md)."
  echo
  cat "$table"
} > benchmarks/conformance.md
echo "wrote benchmarks/conformance.md"
