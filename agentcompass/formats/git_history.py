"""Future git history removed from a task's repository before the agent runs, as SWE-bench's own image builds now
do (its setup_repo.sh: the remote removed, tags after the base commit deleted, the reflog expired, unreachable
objects pruned, then a check that `git log --all` finds nothing newer). Older published images still carry that
history: an agent could `git log --all`, read the reflog, a tag or a packed object and find the upstream fix.

Kept: HEAD, its branch and every commit HEAD descends from (the past the task starts from), a tag or branch on
such a commit, and the base commit the grader checks test files out of (kept by a ref of our own, where it is not
an ancestor of HEAD). Removed: remotes, every other ref (branches, tags, stashes, notes, replace refs pointing
elsewhere or at a non-commit), the reflogs, ORIG_HEAD and FETCH_HEAD, then every object no kept ref reaches (and the commit-graph that lists them).
The repack runs only when such objects exist (counting commits is cheap; repacking a large repository is not).
Then the check: no commit outside HEAD's history is reachable from any ref or reflog, nor present at all."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from agentcompass.core.errors import InfraError

if TYPE_CHECKING:
    from agentcompass.core.sandbox import Sandbox

BASE_REF = "refs/agentcompass/base"  # the grader's base commit, kept where HEAD does not descend from it
SCRUB_TIMEOUT = 900.0  # a repack of a large repository (django, sympy) on a busy machine

SCRIPT = r"""
set -u
git() { command git -c safe.directory='*' "$@"; }  # a checkout another user owns is read all the same
if ! git rev-parse -q --verify HEAD >/dev/null; then
  [ -e .git ] || exit 0  # no repository here: nothing to hide
  echo "the repository's HEAD cannot be read: $(git rev-parse HEAD 2>&1 | tail -n 1)" >&2; exit 6
fi
gitdir=$(git rev-parse --git-dir)
base=${1:-}
if [ -n "$base" ] && git cat-file -e "$base^{commit}" 2>/dev/null && ! git merge-base --is-ancestor "$base" HEAD; then
  git update-ref __BASE_REF__ "$base"
fi
for remote in $(git remote); do git remote remove "$remote" || exit 4; done
branch=$(git symbolic-ref -q HEAD || true)
git for-each-ref --format='%(refname)' | while read -r ref; do
  case "$ref" in refs/agentcompass/*) continue ;; esac
  [ "$ref" = "$branch" ] && continue
  commit=$(git rev-parse -q --verify "$ref^{commit}" 2>/dev/null) && git merge-base --is-ancestor "$commit" HEAD && continue
  git update-ref -d "$ref" || exit 4
done
rm -f "$gitdir/ORIG_HEAD" "$gitdir/FETCH_HEAD"
git reflog expire --expire=now --expire-unreachable=now --all || exit 4
present=$(git cat-file --batch-all-objects --batch-check='%(objecttype)' | grep -c '^commit$')
reachable=$(git rev-list --all --count)
if [ "$present" -gt "$reachable" ]; then
  git repack -a -d -q && git prune --expire=now || exit 4
  # The commit-graph (and a multi-pack index) list every commit they were written for, the removed ones too.
  rm -rf "$gitdir/objects/info/commit-graph" "$gitdir/objects/info/commit-graphs" "$gitdir/objects/pack/multi-pack-index"
  present=$(git cat-file --batch-all-objects --batch-check='%(objecttype)' | grep -c '^commit$')
fi
outside=$(git rev-list --all --reflog --not HEAD __KEPT__ | head -n 1)
if [ -n "$outside" ] || [ "$present" -gt "$(git rev-list --all --count)" ]; then
  echo "commit ${outside:-(unreferenced)} outside HEAD's history is still in the repository" >&2; exit 5
fi
"""


def scrub_script(base_commit: str | None = None) -> str:
    kept = f"$(git rev-parse -q --verify {BASE_REF} || true)"
    body = SCRIPT.replace("__BASE_REF__", BASE_REF).replace("__KEPT__", kept)
    return f"bash -c {shlex.quote(body)} scrub {shlex.quote(base_commit or '')}"


def scrub_future_history(sandbox: "Sandbox", base_commit: str | None = None) -> None:
    """Remove what lies beyond HEAD from the workdir's repository (see the module's doc); InfraError if it cannot
    (the agent must never start in a sandbox where the fix may be one `git log --all` away)."""
    result = sandbox.exec(scrub_script(base_commit), timeout=SCRUB_TIMEOUT)
    if not result.ok:
        lines = [line for line in (result.stderr or result.stdout).strip().splitlines() if line.strip()]
        raise InfraError(f"cannot remove the repository's history beyond HEAD before the agent starts: "
                         f"{lines[-1][:300] if lines else f'exit {result.exit_code}'}")
