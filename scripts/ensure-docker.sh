#!/usr/bin/env bash
# Make sure a Docker engine is answering on this machine (idempotent).
# CI machines are fresh Debian boxes without systemd, so we install docker.io
# from the configured apt mirror and run dockerd ourselves in the background.
set -euo pipefail

LOG="${DOCKERD_LOG:-/var/log/dockerd.log}"
PIDFILE=/var/run/docker.pid
TIMEOUT="${DOCKERD_TIMEOUT:-60}"

docker info >/dev/null 2>&1 && exit 0

[ "$(id -u)" -eq 0 ] || { echo "ensure-docker: must run as root" >&2; exit 1; }

# Debian's docker.io brings dockerd, containerd, runc, iptables and the CLI.
if ! command -v dockerd >/dev/null || ! command -v docker >/dev/null; then
  echo "ensure-docker: installing docker.io" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null
  docker info >/dev/null 2>&1 && exit 0   # a postinst may have started it
fi
touch "$LOG" 2>/dev/null || LOG="$(mktemp -t dockerd.XXXXXX.log)"

# Wait until `docker info` answers; fail early if the daemon $1 died.
wait_ready() {
  local pid=$1 i
  for ((i = 0; i < TIMEOUT; i++)); do
    docker info >/dev/null 2>&1 && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 1
  done
  return 1
}

# A dockerd that is still starting up: just wait for it, never start a second.
if [ -s "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
  wait_ready "$(cat "$PIDFILE")" && exit 0
  echo "ensure-docker: running dockerd $(cat "$PIDFILE") does not answer; log tail:" >&2
  tail -n 30 "$LOG" >&2; exit 1
fi

# Defaults (overlay2 + iptables NAT) work on these VMs. The fallbacks cover
# sandboxes without overlayfs or without netfilter; without iptables the bridge
# network still runs containers but gives them no outbound NAT.
for flags in "" "--iptables=false --ip6tables=false" "--storage-driver=vfs" \
             "--storage-driver=vfs --iptables=false --ip6tables=false"; do
  echo "ensure-docker: starting dockerd ${flags:-(default flags)}; log: $LOG" >&2
  echo "=== $(date -u +%FT%TZ) dockerd $flags" >>"$LOG"
  # setsid+nohup: the daemon must outlive this script and its process group.
  # shellcheck disable=SC2086
  setsid nohup dockerd $flags >>"$LOG" 2>&1 </dev/null &
  pid=$!
  if wait_ready "$pid"; then
    echo "ensure-docker: dockerd ready (pid $pid)" >&2
    exit 0
  fi
  kill "$pid" 2>/dev/null || true  # timed out rather than crashed: stop it
  for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  kill -9 "$pid" 2>/dev/null || true
done

echo "ensure-docker: dockerd did not come up; log tail ($LOG):" >&2
tail -n 40 "$LOG" >&2
exit 1
