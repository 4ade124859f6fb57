#!/bin/bash
# Usage: backup.sh SOURCE_DIR DEST_DIR [KEEP]
#
# Copies SOURCE_DIR to DEST_DIR/backup-YYYYmmdd-HHMMSS, then removes the oldest
# backup-* directories in DEST_DIR so that only the KEEP (default 3) newest remain.
set -e

src=$1
dest=$2
keep=${3:-3}

if [ ! -d $src ]; then
    echo "error: source directory $src does not exist" >&2
    exit 1
fi

mkdir -p $dest
stamp=$(date +%Y%m%d-%H%M%S)
target=$dest/backup-$stamp
cp -a $src $target
echo "created $target"

# rotation: the names sort chronologically, so drop all but the $keep last ones
for old in $(ls -d $dest/backup-* | sort | head -n -$keep); do
    echo "removing old backup $old"
    rm -rf $old
done
