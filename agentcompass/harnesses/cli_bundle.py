"""The host-side bundle of an installed CLI: its native binary, from npm once per (package, version), kept.

`npm install` runs with a cache of its own, so the bytes it has fetched so far can be shown as they grow (a bar
on a terminal, a line before and after otherwise: how much, how long). The runner asks for the bundle only after
every cheap check of the run has passed, so a refused run downloads nothing.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Callable

import structlog

from agentcompass.core.errors import UserError
from agentcompass.core.paths import cache_root

log = structlog.get_logger("agentcompass")
BUNDLE = "agent.tar.gz"
INSTALL_TIMEOUT_S = 600.0
POLL_S = 0.25


def bundle_dir(package: str, version: str, cache_dir: Path | None = None) -> Path:
    return (cache_dir or cache_root() / "cli-agents") / f"{package.replace('/', '+')}@{version}"


def bundle(package: str, version: str, binary: str, command: str, cache_dir: Path | None = None) -> Path:
    """`agent.tar.gz` holding `bin/<command>`: the package's native binary, installed from npm once per
    (package, version)."""
    def write(npm: str, work: Path, partial: Path) -> None:
        found = npm_install(npm, package, version, binary, work)
        with tarfile.open(partial, "w:gz", compresslevel=1) as tar:
            tar.add(found, arcname=f"bin/{command}")

    archive = build_once(package, version, bundle_dir(package, version, cache_dir), write)
    log.info("CLI bundle ready", package=package, version=version, size_mb=round(archive.stat().st_size / 1e6, 1),
             path=str(archive))
    return archive


def build_once(package: str, version: str, root: Path, write: Callable[[str, Path, Path], None]) -> Path:
    """`root/agent.tar.gz`, made by `write(npm, work dir, partial archive)` unless it is there; a lock file lets
    concurrent runs share one build, and a build cut short leaves no archive behind."""
    archive = root / BUNDLE
    if archive.is_file():
        return archive
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if archive.is_file():
            return archive
        npm = shutil.which("npm")
        if npm is None:
            raise UserError(f"installing {package}@{version} needs npm on this machine (Node.js 18+); "
                            f"install Node.js, or pass harness.cache_dir=DIR holding {root.name}/{BUNDLE}")
        work = Path(tempfile.mkdtemp(prefix="npm-", dir=root))
        try:
            partial = root / f"{BUNDLE}.partial"
            write(npm, work, partial)
            partial.rename(archive)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return archive


def npm_install(npm: str, package: str, version: str, binary: str, work: Path, *options: str) -> Path:
    """Install into `work` with a cache there too (its size is what has been downloaded); the binary's path.
    `options`: more npm flags (the Node bundles pass --omit=dev)."""
    cache, prefix = work / "cache", work / "prefix"
    argv = [npm, "install", "--prefix", str(prefix), "--cache", str(cache), "--no-audit", "--no-fund",
            "--loglevel=error", *options, f"{package}@{version}"]
    code, detail = watched_install(argv, f"{package}@{version}", "npm", cache)
    found = prefix / "node_modules" / binary
    if code != 0 or not found.is_file():
        raise UserError(f"cannot install {package}@{version} from npm: {detail or f'no {binary} in the package'}; "
                        f"check the version (npm view {package} versions) and the registry")
    return found


def watched_install(argv: list[str], what: str, registry: str, cache: Path,
                    env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run an installer (npm, pip) whose download cache is `cache`, showing the bytes fetched as they grow; its exit
    code and the tail of its output. Past INSTALL_TIMEOUT_S, or on Ctrl-C, the installer is killed with us."""
    label = f"downloading {what} from {registry}"
    started = time.monotonic()
    with tempfile.TemporaryFile("w+") as output, DownloadDisplay(label) as display:
        proc = subprocess.Popen(argv, stdout=output, stderr=subprocess.STDOUT, text=True, env=env)
        try:
            while proc.poll() is None:
                if time.monotonic() - started > INSTALL_TIMEOUT_S:
                    raise UserError(f"installing {what} from {registry} took over {INSTALL_TIMEOUT_S:.0f} s; "
                                    "check the registry")
                display.update(tree_size(cache))
                time.sleep(POLL_S)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        display.update(tree_size(cache), done=True)
        output.seek(0)
        return proc.returncode, " ".join(output.read().split())[-300:]


def tree_size(path: Path) -> int:
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:  # npm moved it meanwhile
                pass
    return total


class DownloadDisplay:
    """A rich bar of bytes fetched on a terminal; elsewhere a line when it starts and one when it ends."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.started = time.monotonic()
        self.progress = None
        self.task = None

    def __enter__(self) -> "DownloadDisplay":
        if sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import DownloadColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn, TransferSpeedColumn

            self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), DownloadColumn(),
                                     TransferSpeedColumn(), TimeElapsedColumn(), console=Console(stderr=True),
                                     transient=False)
            self.progress.start()
            self.task = self.progress.add_task(self.label, total=None)
        else:
            print(f"{self.label} (once; kept in the cache) ...", file=sys.stderr, flush=True)
        return self

    def update(self, fetched: int, done: bool = False) -> None:
        if self.progress is not None:
            self.progress.update(self.task, completed=fetched, total=fetched if done else None)
        elif done:
            print(f"{self.label}: {fetched / 1e6:.1f} MB in {time.monotonic() - self.started:.0f} s",
                  file=sys.stderr, flush=True)

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.stop()
