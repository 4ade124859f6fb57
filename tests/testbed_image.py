"""A SWE-bench-like instance image for tests: a git repository at /testbed and a fake conda `testbed` env
(/root/.bashrc sets CONDA_DEFAULT_ENV and puts the env's `python` first on PATH, as SWE-bench images do),
built on the local base image once per content."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com", "GIT_AUTHOR_DATE": "2024-01-01T00:00:00Z",
           "GIT_COMMITTER_DATE": "2024-01-01T00:00:00Z"}
BASHRC = "export CONDA_DEFAULT_ENV=testbed\nexport PATH=/opt/conda/envs/testbed/bin:$PATH\n"


def build_testbed_image(base_image: str, context: Path, files: dict[str, bytes], name: str) -> tuple[str, str]:
    """(image tag, base commit) of an image whose /testbed holds `files`, committed once."""
    repo = context / "testbed"
    repo.mkdir()
    for rel, data in files.items():
        (repo / rel).write_bytes(data)
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "base"]):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, env={**os.environ, **GIT_ENV})
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, check=True, capture_output=True,
                            text=True).stdout.strip()
    (context / "bashrc").write_text(BASHRC)
    dockerfile = (f"FROM {base_image}\nCOPY testbed /testbed\nCOPY bashrc /root/.bashrc\n"
                  "RUN mkdir -p /opt/conda/envs/testbed/bin && ln -s /usr/bin/python3 /opt/conda/envs/testbed/bin/python\n"
                  "WORKDIR /testbed\n")
    (context / "Dockerfile").write_text(dockerfile)
    tag = f"agentcompass-test/{name}:{hashlib.sha256((dockerfile + BASHRC + commit).encode()).hexdigest()[:12]}"
    if subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode != 0:
        subprocess.run(["docker", "build", "-q", "-t", tag, str(context)], check=True, capture_output=True)
    return tag, commit
