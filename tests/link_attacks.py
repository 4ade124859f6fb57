"""What the link tests of every env share: a tree where an agent left links out of it, and a look at what a
host-side copy of it holds."""

from __future__ import annotations

import os
from pathlib import Path

SECRET = "host-secret-7f3a91"  # what a host file outside every sandbox holds


def everything_under(root: Path) -> dict[str, str]:
    """Every entry under root: a link as `-> target`, a file as its text."""
    seen = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder, name)
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                seen[rel] = "-> " + os.readlink(path)
            elif path.is_file():
                seen[rel] = path.read_text(errors="replace")
            else:
                seen[rel] = ""  # a folder
    return seen


def assert_download_follows_no_link(sandbox, tmp_path: Path) -> None:
    """Any env's download of a tree where the agent left a link to a host file and one to /etc/shadow beside an
    honest folder with a link inside it: the honest part arrives as it was, both links are refused and reported."""
    host = tmp_path / "host-only"
    host.mkdir(exist_ok=True)
    (host / "secret-file").write_text(SECRET)
    plant = ("mkdir -p /logs/artifacts/sub && echo kept > /logs/artifacts/sub/a.txt && ln -s a.txt /logs/artifacts/sub/b"
             ' && ln -s "$HOST/secret-file" /logs/artifacts/x && ln -s /etc/shadow /logs/artifacts/shadow')
    # The host path by the environment: the local provider's isolation none rewrites /tmp/... in a command.
    assert sandbox.exec(plant, env={"HOST": str(host)}).exit_code == 0
    results = tmp_path / "results"
    refused = sandbox.download("/logs/artifacts", results / "artifacts")
    assert sorted(refused) == ["/logs/artifacts/shadow: a link to /etc/shadow, out of the copied tree (not followed, not copied)",
                               f"/logs/artifacts/x: a link to {host}/secret-file, out of the copied tree (not followed, not copied)"]
    assert everything_under(results) == {"artifacts": "", "artifacts/sub": "", "artifacts/sub/a.txt": "kept\n",
                                         "artifacts/sub/b": "-> a.txt"}
