#!/bin/bash
# Verifier for fix-backup-script. Runs /app/backup.sh in scratch directories
# whose paths contain spaces and checks copy + rotation results.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
cd /app || exit 0

fail=0
check() {  # check <description> <command...>
    local desc=$1; shift
    if "$@"; then echo "PASS: $desc"; else echo "FAIL: $desc"; fail=1; fi
}
count_backups() {  # number of backup-* directories in $1
    local n=0 d
    for d in "$1"/backup-*; do [ -d "$d" ] && n=$((n + 1)); done
    echo "$n"
}
new_backup() {  # the backup-* dir in $1 that is not one of the pre-created 2024 ones
    local d
    for d in "$1"/backup-*; do
        case "${d##*/}" in backup-2024010[1-9]-000000) ;; *) [ -d "$d" ] && echo "$d" ;; esac
    done
}
same_tree() {  # same_tree A B: identical file names and contents
    python3 - "$1" "$2" <<'PY'
import filecmp, os, sys
a, b = sys.argv[1:3]
def walk(root):
    out = {}
    for d, dirs, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            out[os.path.relpath(p, root)] = p
    return out
wa, wb = walk(a), walk(b)
ok = sorted(wa) == sorted(wb) and all(filecmp.cmp(wa[k], wb[k], shallow=False) for k in wa)
if not ok:
    print("   expected files:", sorted(wa), "\n   got files:", sorted(wb))
sys.exit(0 if ok else 1)
PY
}

base=$(mktemp -d)
app_before=$(ls -A /app)

# ---- scenario 1: spaces everywhere, default KEEP=3
src="$base/My Documents"
dest="$base/Backup Drive/daily"
mkdir -p "$src/photos/summer 2024" "$dest"
echo "remember the milk" > "$src/notes 2024.txt"
echo "beach" > "$src/photos/summer 2024/beach day.jpg"
echo "*" > "$src/star * file.txt"
for d in 1 2 3 4; do
    mkdir "$dest/backup-2024010$d-000000"
    echo "old $d" > "$dest/backup-2024010$d-000000/marker.txt"
    touch -d "2024-01-0$d 00:00:00" "$dest/backup-2024010$d-000000"
done
echo "do not delete" > "$dest/README keep me.txt"

echo "== scenario 1: bash /app/backup.sh '$src' '$dest'"
bash /app/backup.sh "$src" "$dest"
rc=$?
check "exit status 0 (got $rc)" test "$rc" -eq 0
n=$(count_backups "$dest")
check "exactly 3 backups remain (got $n)" test "$n" -eq 3
nb=$(new_backup "$dest")
check "a new backup-* directory was created" test -n "$nb" -a -d "$nb"
check "new backup is a full copy of the source" same_tree "$src" "${nb:-/nonexistent}"
check "newest old backups kept (20240103, 20240104)" \
    test -f "$dest/backup-20240103-000000/marker.txt" -a -f "$dest/backup-20240104-000000/marker.txt"
check "oldest backups removed (20240101, 20240102)" \
    test ! -e "$dest/backup-20240101-000000" -a ! -e "$dest/backup-20240102-000000"
check "other files in DEST_DIR untouched" test -f "$dest/README keep me.txt"
check "source left intact" test -f "$src/notes 2024.txt" -a -f "$src/photos/summer 2024/beach day.jpg"
check "no stray directories created from split paths" \
    test ! -e "$base/Backup" -a ! -e "$base/My" -a ! -e /app/Drive -a ! -e /app/Documents

# ---- scenario 2: explicit KEEP=1
src2="$base/project files"
dest2="$base/other dest"
mkdir -p "$src2" "$dest2/backup-20240105-000000"
touch -d "2024-01-05 00:00:00" "$dest2/backup-20240105-000000"
echo "v2" > "$src2/main file.py"
echo "== scenario 2: bash /app/backup.sh '$src2' '$dest2' 1"
bash /app/backup.sh "$src2" "$dest2" 1
rc=$?
check "exit status 0 (got $rc)" test "$rc" -eq 0
n=$(count_backups "$dest2")
check "exactly 1 backup remains with KEEP=1 (got $n)" test "$n" -eq 1
nb2=$(new_backup "$dest2")
check "the remaining backup is the new one, a full copy" same_tree "$src2" "${nb2:-/nonexistent}"

# ---- scenario 3: missing source directory
echo "== scenario 3: missing source"
bash /app/backup.sh "$base/no such dir" "$base/dest 3"
rc=$?
check "non-zero exit status for a missing source (got $rc)" test "$rc" -ne 0
check "no backup created for a missing source" test "$(count_backups "$base/dest 3")" -eq 0

app_after=$(ls -A /app)
check "no stray files created in /app" test "$app_before" = "$app_after"
rm -rf "$base"

if [ "$fail" -eq 0 ]; then
    echo "all checks passed"
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
