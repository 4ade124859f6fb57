#!/usr/bin/env bash
# Build the local image agentcompass/base:bookworm without any image registry:
# debootstrap a minimal bookworm from the machine's own apt mirror and
# `docker import` it. Usage: build-base-image.sh [--force]
set -euo pipefail

IMAGE=agentcompass/base:bookworm
SUITE=bookworm
INCLUDE=python3,git,ca-certificates,procps   # bash/coreutils are in minbase

force=0
[ "${1:-}" = "--force" ] && force=1
if [ "$force" = 0 ] && docker image inspect "$IMAGE" >/dev/null 2>&1; then
  echo "build-base-image: $IMAGE already exists (use --force to rebuild)"; exit 0
fi
start=$SECONDS

# The mirror is whatever apt is configured with (no host names in this repo):
# the first enabled `deb` source whose suites include $SUITE and components
# include main, in apt's file order; handles one-line and deb822 formats.
apt_mirror() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*; do
    [ -r "$f" ] || continue
    case "$f" in
      *.list) awk -v s="$SUITE" '
        $1 == "deb" { sub(/\[[^]]*\]/, ""); if ($3 != s) next
          for (i = 4; i <= NF; i++) if ($i == "main") { print $2; exit } }' "$f" ;;
      *.sources) awk -v s="$SUITE" '
        function flush() {
          if (en != "no" && (" " ty " ") ~ / deb / && (" " su " ") ~ (" " s " ") &&
              (" " co " ") ~ / main / && ur != "") { split(ur, u, " "); print u[1]; exit }
          ty = su = co = ur = en = "" }
        /^[ \t]*$/ { flush(); next }
        /^#/ || /^[ \t]/ { next }
        { k = tolower($1); $1 = ""; v = $0; gsub(/^[ \t]+|[ \t]+$/, "", v) }
        k == "types:" { ty = v } k == "uris:" { ur = v } k == "suites:" { su = v }
        k == "components:" { co = v } k == "enabled:" { en = tolower(v) }
        END { flush() }' "$f" ;;
    esac
  done | head -n 1
}
MIRROR="${MIRROR:-$(apt_mirror)}"
[ -n "$MIRROR" ] || { echo "build-base-image: no '$SUITE main' deb source in apt config" >&2; exit 1; }

if ! command -v debootstrap >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi

ROOTFS="$(mktemp -d /var/tmp/agentcompass-rootfs.XXXXXX)"
# debootstrap mounts proc/sys (and maybe dev) inside the target; unmount them
# before deleting so a failed run can never rm -rf through into the host.
cleanup() {
  grep -o " $ROOTFS[^ ]*" /proc/mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  rm -rf --one-file-system "$ROOTFS" "$ROOTFS.log"
}
trap cleanup EXIT

echo "build-base-image: debootstrap $SUITE from $MIRROR"
debootstrap --variant=minbase --include="$INCLUDE" --components=main \
  "$SUITE" "$ROOTFS" "$MIRROR" >"$ROOTFS.log" 2>&1 \
  || { tail -n 30 "$ROOTFS.log" >&2; exit 1; }

# Slim the image and keep later apt installs inside it doc-free as well.
rm -rf "$ROOTFS"/usr/share/{doc,man,info,locale}/* "$ROOTFS"/var/cache/apt/*.bin \
  "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/* \
  "$ROOTFS"/var/log/*.log "$ROOTFS"/var/log/apt/*
cat >"$ROOTFS/etc/dpkg/dpkg.cfg.d/01-nodoc" <<'EOF'
path-exclude=/usr/share/doc/*
path-exclude=/usr/share/man/*
path-exclude=/usr/share/info/*
path-exclude=/usr/share/locale/*
EOF

tar -C "$ROOTFS" --numeric-owner -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'CMD ["/bin/bash"]' - "$IMAGE" >/dev/null

echo "build-base-image: built $IMAGE ($(docker image inspect -f '{{.Size}}' "$IMAGE" | numfmt --to=iec)) in $((SECONDS - start)) s"
