#!/bin/bash
# Reference solution: revert the commit that replaced the title-casing normalization.
set -e
cd /app
bad=$(git log --format=%H --grep='^Speed up name normalization$' main | head -n1)
git show --stat "$bad"
git revert --no-edit "$bad"
git log --oneline
python3 -c 'from greet import greet; print(greet("  ada lovelace "))'
