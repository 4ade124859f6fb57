#!/bin/bash
# Creates the git repository with history for this task. Run from /app.
set -euo pipefail
cd /app

export GIT_AUTHOR_NAME="Dana Dev" GIT_AUTHOR_EMAIL="dana@example.com"
export GIT_COMMITTER_NAME="Dana Dev" GIT_COMMITTER_EMAIL="dana@example.com"
export GIT_CONFIG_NOSYSTEM=1

commit() {  # commit <date> <message>
    GIT_AUTHOR_DATE="$1" GIT_COMMITTER_DATE="$1" git commit -q -m "$2"
}

git init -q -b main
git config user.name "Dana Dev"
git config user.email "dana@example.com"

cat > greet.py <<'EOF'
"""Tiny greeting library."""


def normalize(name):
    """Collapse whitespace and title-case a person's name."""
    return " ".join(part.capitalize() for part in name.split())


def greet(name):
    return f"Hello, {normalize(name)}!"
EOF
cat > README.md <<'EOF'
# greet

A tiny greeting library.
EOF
git add greet.py README.md
commit "2024-05-01T09:00:00+00:00" "Initial greeting library"

cat >> greet.py <<'EOF'


def farewell(name):
    return f"Goodbye, {normalize(name)}. See you soon!"
EOF
git add greet.py
commit "2024-05-02T10:15:00+00:00" "Add farewell()"

python3 - <<'EOF'
from pathlib import Path
p = Path("greet.py")
s = p.read_text()
s = s.replace(
    '    """Collapse whitespace and title-case a person\'s name."""\n'
    '    return " ".join(part.capitalize() for part in name.split())\n',
    '    """Normalize a person\'s name (fast path)."""\n'
    '    return name.strip()\n',
)
p.write_text(s)
EOF
git add greet.py
commit "2024-05-03T14:30:00+00:00" "Speed up name normalization"

cat > CHANGELOG.md <<'EOF'
# Changelog

## 0.2.0
- Added `farewell()`.
EOF
git add CHANGELOG.md
commit "2024-05-04T08:45:00+00:00" "Add changelog"

cat >> README.md <<'EOF'

Usage:

    from greet import greet, farewell
    greet("ada")      # 'Hello, Ada!'
    farewell("ada")   # 'Goodbye, Ada. See you soon!'
EOF
git add README.md
commit "2024-05-05T16:20:00+00:00" "Document usage in README"
