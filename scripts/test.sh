#!/usr/bin/env bash
# Installs everything the test suite needs on a fresh Debian machine, then runs it.
# This is the README's test command and what CI runs (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."

# System packages: bubblewrap (local isolation), passt (pasta: the network of internet-enabled local tasks), debootstrap (the base image), docker.io (engine),
# chromium (opens report.html headless), openssh-server (the gcp provider's SSH path runs against a local sshd),
# tmux (Terminal-Bench's shells on --env local), npm (bundles the opencode/claude_code/codex CLIs for sandboxes),
# podman (--env podman: its tests start its API service themselves, rootful and rootless; uidmap: newuidmap for rootless).
missing=()
command -v bwrap >/dev/null || missing+=(bubblewrap)
command -v pasta >/dev/null || missing+=(passt)
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v chromium >/dev/null || missing+=(chromium)
test -x /usr/sbin/sshd || missing+=(openssh-server)
command -v tmux >/dev/null || missing+=(tmux)
command -v npm >/dev/null || missing+=(npm)
command -v podman >/dev/null || missing+=(podman)
command -v newuidmap >/dev/null || missing+=(uidmap)
if [ ${#missing[@]} -gt 0 ] && [ "$(id -u)" = 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The official tools the conformance suite compares against, each in a side venv of its own (tests/sidevenv.py),
# built here once and cached across runs: a pip install on a busy fresh machine can take minutes, which must not count
# against any test's timeout. They need nothing of ours, so they build while this checkout installs and the engine
# and base image come up (together about half the serial set-up time on a fresh 2-core machine). A failure here is
# reported again by the tests that need the tool.
side_log="$(mktemp -t agentcompass-side-venvs.XXXXXX)"
python tests/sidevenv.py >"$side_log" 2>&1 &
side_pid=$!
trap 'kill "$side_pid" 2>/dev/null || true; rm -f "$side_log"' EXIT

python -m pip install -q -e '.[all]'

# The Docker engine and the local base image every test image builds on.
bash scripts/ensure-docker.sh
bash scripts/build-base-image.sh

wait "$side_pid" || echo "scripts/test.sh: some side venvs could not be built; their conformance tests will say why" >&2
cat "$side_log"

# In parallel (pytest-xdist): the tests mostly wait on Docker, sandboxes and CLI subprocesses, so twice as many
# workers as cores pay (benchmarks/suite_time.md has the measurements). loadscope: a module's tests run on one
# worker, so its module fixtures are built once and its tests never race each other for a run name (container
# names derive from it) on the shared engine; the slowest modules go first (tests/conftest.py). What workers
# share across modules (images, npm bundles, side venvs) is built once under a lock.
# AGENTCOMPASS_TEST_WORKERS=N sets the count; arguments after ours win (`-n 0`: serially).
workers="${AGENTCOMPASS_TEST_WORKERS:-$(( $(nproc) * 2 ))}"
python -m pytest -q --run-conformance -n "$workers" --dist loadscope --no-loadscope-reorder --durations=10 "$@"
