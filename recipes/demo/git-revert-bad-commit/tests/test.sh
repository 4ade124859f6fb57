#!/bin/bash
# Verifier for git-revert-bad-commit.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
cd /app || exit 0

g() { git -c safe.directory='*' -C /app "$@"; }
fail=0
check() {  # check <description> <command...>
    local desc=$1; shift
    if "$@"; then echo "PASS: $desc"; else echo "FAIL: $desc"; fail=1; fi
}

echo "== git history of main"
g log --oneline main 2>&1 | head -20

check "repository is on branch main" test "$(g symbolic-ref --short HEAD 2>/dev/null)" = "main"

expected_first="Initial greeting library
Add farewell()
Speed up name normalization
Add changelog
Document usage in README"
first5=$(g log --reverse --format=%s main 2>/dev/null | head -n 5)
check "the 5 original commits are still the first commits of main, in order" \
    test "$first5" = "$expected_first"
count=$(g rev-list --count main 2>/dev/null || echo 0)
check "a new commit was added on top (commits: $count)" test "$count" -ge 6

# History must not be rewritten: the bad commit must still exist unmodified.
bad=$(g log --format=%H --grep='^Speed up name normalization$' main 2>/dev/null | head -n 1)
bad_greet=$( [ -n "$bad" ] && g show "$bad:greet.py" 2>/dev/null )
check "the bad commit is still in history, unmodified" \
    test -n "$bad" -a "${bad_greet/"return name.strip()"/}" != "$bad_greet"
last=$(g log -1 --format=%s main 2>/dev/null)
check "the fix is committed after the existing commits (HEAD: '$last')" \
    test "$last" != "Document usage in README"

check "working tree is clean (no uncommitted changes to tracked files)" \
    test -z "$(g status --porcelain --untracked-files=no 2>/dev/null)"

# Check behaviour of the committed code (exported from HEAD, not the working tree).
tmp=$(mktemp -d)
for f in greet.py README.md CHANGELOG.md; do g show "main:$f" > "$tmp/$f" 2>/dev/null; done
check "greet.py in HEAD formats names again and keeps farewell()" python3 - "$tmp" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
from greet import greet, farewell
cases = [
    (greet("  ada lovelace "), "Hello, Ada Lovelace!"),
    (greet("grace   HOPPER"), "Hello, Grace Hopper!"),
    (farewell("alan turing"), "Goodbye, Alan Turing. See you soon!"),
]
ok = True
for got, want in cases:
    print(f"  got {got!r}, want {want!r}")
    ok &= got == want
sys.exit(0 if ok else 1)
PY
changelog=$(cat "$tmp/CHANGELOG.md" 2>/dev/null); readme=$(cat "$tmp/README.md" 2>/dev/null)
check "CHANGELOG.md from later commit is kept" test "${changelog/"farewell()"/}" != "$changelog"
check "README usage section from later commit is kept" test "${readme/"Usage:"/}" != "$readme"
rm -rf "$tmp"

if [ "$fail" -eq 0 ]; then
    echo "all checks passed"
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
