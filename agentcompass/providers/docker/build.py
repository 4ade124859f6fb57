"""Task image builds for the docker provider: BuildKit through the docker CLI, killable at any moment.

docker-py only speaks the legacy builder, which rejects `RUN --mount`, `COPY --chmod` and
heredocs. The docker CLI builds with the engine's BuildKit when DOCKER_BUILDKIT=1 and it either
predates Docker 23 (BuildKit client built in) or has the buildx plugin. An engine older than 23
ships a Dockerfile frontend without heredocs: see heredocs.py. Without such a CLI the
engine's legacy builder is used, and said so.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from agentcompass.core.errors import InfraError
from agentcompass.providers.docker.heredocs import prepared_dockerfile
from agentcompass.providers.remote import one_line

CANDIDATE_CLIS = ("/usr/bin/docker", "/usr/local/bin/docker")
KILL_GRACE_S = 3.0


def cli_major(cli: str) -> int | None:
    try:
        done = subprocess.run([cli, "version", "--format", "{{.Client.Version}}"], capture_output=True, text=True,
                              timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.match(r"\s*(\d+)\.", done.stdout)
    return int(match.group(1)) if match else None


def has_buildx(cli: str) -> bool:
    try:
        return subprocess.run([cli, "buildx", "version"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@functools.cache
def find_buildkit_cli() -> tuple[list[str] | None, str]:
    """The command that builds with BuildKit (`docker build`, `docker buildx build --load`), and what was
    found (for build.log and the fallback warning)."""
    candidates = dict.fromkeys(c for c in (shutil.which("docker"), *CANDIDATE_CLIS) if c and os.access(c, os.X_OK))
    seen = []
    for cli in candidates:
        major = cli_major(cli)
        if major is None:
            seen.append(f"{cli} (does not run)")
        elif major < 23:
            return [cli, "build"], f"{cli} {major}.x with its built-in BuildKit client"
        elif has_buildx(cli):
            return [cli, "buildx", "build", "--load"], f"{cli} {major}.x with buildx"
        else:
            seen.append(f"{cli} {major}.x without the buildx plugin")
    return None, "no docker CLI that can build with BuildKit: " + ("; ".join(seen) or "no docker CLI on PATH")


class BuildProcesses:
    """The build processes running in this process, so an interrupt can end them all at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen[bytes]] = set()
        self.stopping = threading.Event()

    def start(self, argv: list[str], log: IO[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        with self._lock:
            if self.stopping.is_set():
                raise InterruptedError("interrupted")
            # Its own session: a kill reaches the CLI and whatever it started, and nothing else.
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                    start_new_session=True)
            self._running.add(proc)
            return proc

    def finish(self, proc: subprocess.Popen[bytes]) -> None:
        with self._lock:
            self._running.discard(proc)

    def kill_all(self) -> None:
        """End every build: the CLI going away cancels the build in the engine."""
        self.stopping.set()
        with self._lock:
            procs = list(self._running)
        for proc in procs:
            kill_session(proc)


def kill_session(proc: subprocess.Popen[bytes]) -> None:
    for sig, wait in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, KILL_GRACE_S)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


BUILDS = BuildProcesses()


def run_build(build: list[str], context: Path, dockerfile: Path, args: list[tuple[str, str]], tag: str, log: IO[str],
              timeout_s: float) -> tuple[int | None, str]:
    """Build `tag`; returns (exit code, '') or (None, why) when it timed out or was interrupted."""
    env = {**os.environ, "DOCKER_BUILDKIT": "1", "BUILDKIT_PROGRESS": "plain"}
    build_args = [word for key, value in args for word in ("--build-arg", f"{key}={value}")]
    argv = [*build, "--progress=plain", "--tag", tag, "--file", str(dockerfile), *build_args, str(context)]
    log.write(f"$ DOCKER_BUILDKIT=1 {shlex.join(argv)}\n")
    log.flush()  # the build process appends to the same file
    proc = BUILDS.start(argv, log, env)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                return proc.wait(0.2), ""
            except subprocess.TimeoutExpired:
                pass
            if BUILDS.stopping.is_set():
                kill_session(proc)
                return None, "interrupted"
            if time.monotonic() > deadline:
                kill_session(proc)
                return None, f"took longer than {timeout_s:.0f}s"
    finally:
        BUILDS.finish(proc)


@dataclass(frozen=True)
class BuildRequest:
    context: Path
    dockerfile: str  # its name in the context
    args: list[tuple[str, str]]  # build args
    tag: str
    task: str  # for messages


def build_image(api: Any, request: BuildRequest, log: IO[str], buildkit: bool, timeout_s: float) -> None:
    """Build with BuildKit through the docker CLI when one can, else with the engine's legacy builder."""
    cli, found = find_buildkit_cli() if buildkit else (None, "buildkit: false in the settings")
    if cli:
        log.write(f"builder: BuildKit through {found}\n")
        build_with_cli(api, cli, request, log, timeout_s)
        return
    if buildkit:
        warn_legacy_builder(found)
    log.write(f"builder: the engine's legacy builder ({found}); heredocs, RUN --mount and COPY --chmod fail with it\n")
    build_legacy(api, request, log, timeout_s)


def build_with_cli(api: Any, cli: list[str], request: BuildRequest, log: IO[str], timeout_s: float) -> None:
    """BuildKit through the docker CLI, its output straight into build.log; killed on timeout or interrupt."""
    major = engine_major(api)
    code, why, text = build_once(cli, request, log, timeout_s, major, builtin_frontend=False)
    if code not in (0, None) and FRONTEND_UNREACHABLE.search(text):
        # The `# syntax=` frontend is an image from a registry this machine cannot reach (offline builds):
        # the engine's own frontend reads the Dockerfile instead (heredocs rewritten where it predates them).
        log.write("the Dockerfile's `# syntax=` frontend cannot be fetched: building again with the engine's "
                  "built-in Dockerfile frontend\n")
        code, why, text = build_once(cli, request, log, timeout_s, major, builtin_frontend=True)
    if code == 0:
        return
    if why == "interrupted":
        raise InfraError(f"task '{request.task}': docker build interrupted")
    reason = why or (last_error_line(text) or f"docker build exited {code}")
    raise InfraError(f"task '{request.task}': docker build of its environment failed: {one_line(reason)[:300]}; see build.log")


# BuildKit's words when the frontend image a `# syntax=` line names cannot be pulled.
FRONTEND_UNREACHABLE = re.compile(r"(resolve image config for|failed to solve with frontend dockerfile\.v0|"
                                  r"docker/dockerfile).*(no such host|dial tcp|i/o timeout|connection refused|"
                                  r"server misbehaving|failed to do request|network is unreachable)", re.IGNORECASE)


def build_once(cli: list[str], request: BuildRequest, log: IO[str], timeout_s: float, major: int | None,
               builtin_frontend: bool) -> tuple[int | None, str, str]:
    """One build: (exit code or None, why it stopped, what it wrote)."""
    with tempfile.TemporaryDirectory(prefix="agentcompass-build-") as scratch:
        path, rewritten = prepared_dockerfile(request.context / request.dockerfile, major, Path(scratch),
                                              builtin_frontend=builtin_frontend)
        if rewritten:
            log.write("heredocs rewritten into shell commands: this engine's Dockerfile frontend predates them\n")
        start = log.tell()
        code, why = run_build(cli, request.context, path, request.args, request.tag, log, timeout_s)
    log.seek(start)
    return code, why, log.read()


def build_legacy(api: Any, request: BuildRequest, log: IO[str], timeout_s: float,
                 archive: IO[bytes] | None = None) -> None:
    """docker-py's build: the engine's legacy builder, for machines without a BuildKit-capable CLI.
    `archive`: the build context as a tar made by the caller (request.dockerfile is then its name in it)."""
    import docker

    failed = f"task '{request.task}': docker build of its environment failed"
    deadline = time.monotonic() + timeout_s
    context: dict[str, Any] = {"fileobj": archive, "custom_context": True} if archive else {"path": str(request.context)}
    try:
        stream = api.build(**context, dockerfile=request.dockerfile, buildargs=dict(request.args),
                           tag=request.tag, rm=True, forcerm=True, decode=True, timeout=int(timeout_s))
        for event in stream:
            text = event.get("stream") or event.get("status") or ""
            if text:
                log.write(text)
            if "error" in event:
                log.write(f"ERROR: {event['error']}\n")
                raise InfraError(f"{failed}: {one_line(event['error'])[:300]}; see build.log")
            if time.monotonic() > deadline:
                raise InfraError(f"task '{request.task}': docker build took longer than {timeout_s:.0f}s; see build.log")
    except docker.errors.DockerException as exc:
        raise InfraError(f"{failed}: {one_line(exc)[:300]}; see build.log") from exc


def engine_major(api: Any) -> int | None:
    match = re.match(r"(\d+)\.", str(api.version().get("Version", "")))
    return int(match.group(1)) if match else None


def last_error_line(output: str) -> str | None:
    """The most telling line of a failed BuildKit build: its ERROR, else the last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith(("ERROR", "error:", "failed to solve"))]
    return (errors or lines or [None])[-1]


_warned = False


def warn_legacy_builder(reason: str) -> None:
    """Say once per process that builds fall back to the legacy builder, and why."""
    global _warned
    if not _warned:
        _warned = True
        print(f"warning: docker builds use the engine's legacy builder: {reason}", file=sys.stderr)


