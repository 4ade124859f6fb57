#!/bin/bash
# Reference solution: quote every expansion and iterate over the glob safely.
set -e
cat > /app/backup.sh <<'SCRIPT'
#!/bin/bash
# Usage: backup.sh SOURCE_DIR DEST_DIR [KEEP]
#
# Copies SOURCE_DIR to DEST_DIR/backup-YYYYmmdd-HHMMSS, then removes the oldest
# backup-* directories in DEST_DIR so that only the KEEP (default 3) newest remain.
set -euo pipefail

src=${1:?usage: backup.sh SOURCE_DIR DEST_DIR [KEEP]}
dest=${2:?usage: backup.sh SOURCE_DIR DEST_DIR [KEEP]}
keep=${3:-3}

if [ ! -d "$src" ]; then
    echo "error: source directory $src does not exist" >&2
    exit 1
fi

mkdir -p -- "$dest"
stamp=$(date +%Y%m%d-%H%M%S)
target="$dest/backup-$stamp"
cp -a -- "$src" "$target"
echo "created $target"

# rotation: the names sort chronologically (glob expansion is sorted), so
# drop all but the $keep last ones
backups=()
for d in "$dest"/backup-*; do
    [ -d "$d" ] && backups+=("$d")
done
remove=$(( ${#backups[@]} - keep ))
for (( i = 0; i < remove; i++ )); do
    echo "removing old backup ${backups[i]}"
    rm -rf -- "${backups[i]}"
done
SCRIPT
chmod +x /app/backup.sh
