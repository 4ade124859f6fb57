"""Image builds with BuildKit through the docker CLI, killable at any moment.

docker-py only speaks the legacy builder, which rejects `RUN --mount`, `COPY --chmod` and
heredocs. The docker CLI builds with the engine's BuildKit when DOCKER_BUILDKIT=1 and it either
predates Docker 23 (BuildKit client built in) or has the buildx plugin. An engine older than 23
ships a Dockerfile frontend without heredocs; for it the Dockerfile's heredocs are rewritten into
plain shell (see rewrite_heredocs), as BuildKit itself hands them to the shell.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import IO

HEREDOC = re.compile(r"<<(-?)(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\2")
HEREDOC_ENGINE_MAJOR = 23  # the first engine whose built-in Dockerfile frontend reads heredocs
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


def prepared_dockerfile(original: Path, engine_major: int | None, workdir: Path) -> tuple[Path, bool]:
    """The Dockerfile to build: the original, or a heredoc-free rewrite in `workdir` for an old engine."""
    if engine_major is not None and engine_major >= HEREDOC_ENGINE_MAJOR:
        return original, False
    text = original.read_text(encoding="utf-8", errors="replace")
    if re.match(r"\s*#\s*syntax\s*=", text):
        return original, False  # the Dockerfile names its own frontend
    rewritten = rewrite_heredocs(text)
    if rewritten is None:
        return original, False
    path = workdir / "Dockerfile"
    path.write_text(rewritten, encoding="utf-8")
    return path, True


def temporary_dir() -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="agentcompass-build-")


# -- heredocs for engines whose Dockerfile frontend predates them --------------------------------
def rewrite_heredocs(text: str) -> str | None:
    """The Dockerfile with every RUN/COPY/ADD heredoc turned into a shell command; None if it has none.

    As BuildKit does: `RUN <<EOF` alone runs the body with the shell (a body starting with #! runs
    as an executable file); any other RUN passes its whole text, heredocs included, to the shell;
    `COPY <<NAME dest` writes the body to dest (dest/NAME for a directory) with a shell command.
    """
    lines = text.splitlines()
    out: list[str] = []
    shell = ["/bin/sh", "-c"]
    changed = False
    i = 0
    while i < len(lines):
        raw = [lines[i]]
        i += 1
        while raw[-1].rstrip().endswith("\\") and i < len(lines) and not HEREDOC.search("\n".join(raw)):
            raw.append(lines[i])
            i += 1
        instruction = "\n".join(raw)  # continuations kept: the shell reads them as Docker does
        words = instruction.split(None, 1)
        keyword = words[0].upper() if words else ""
        rest = words[1] if len(words) > 1 else ""
        if keyword == "SHELL":
            try:
                shell = json.loads(rest)
            except ValueError:
                pass
        heredocs = HEREDOC.findall(rest) if keyword in ("RUN", "COPY", "ADD") and not rest.lstrip().startswith("[") else []
        if not heredocs:
            out.extend(raw)
            continue
        bodies: list[tuple[str, bool, str, list[str]]] = []  # (name, quoted, terminator line, body lines)
        for dash, quote, name in heredocs:
            body = []
            while i < len(lines) and (lines[i].lstrip("\t") if dash else lines[i]) != name:
                body.append(lines[i].lstrip("\t") if dash else lines[i])
                i += 1
            terminator = lines[i] if i < len(lines) else name
            i += 1
            bodies.append((name, bool(quote), terminator, body))
        flags, command = split_flags(rest)
        if keyword == "RUN":
            out.append(run_line(flags, command, bodies, shell))
        else:
            out.extend(copy_lines(keyword, flags, command, bodies))
        changed = True
    return "\n".join(out) + "\n" if changed else None


def split_flags(rest: str) -> tuple[list[str], str]:
    flags = []
    rest = rest.strip()
    while match := re.match(r"(--\S+)(?:\s|\\\n)*", rest):
        flags.append(match.group(1))
        rest = rest[match.end():]
    return flags, rest


def exec_form(keyword: str, flags: list[str], argv: list[str]) -> str:
    return " ".join([keyword, *flags, json.dumps(argv)])


def run_line(flags: list[str], command: str, bodies: list[tuple[str, bool, str, list[str]]], shell: list[str]) -> str:
    if len(bodies) == 1 and HEREDOC.fullmatch(command.strip()):
        script = "\n".join(bodies[0][3]) + "\n"
        if not script.startswith("#!"):
            return exec_form("RUN", flags, [*shell, script])
        # An interpreter line: BuildKit runs the body as an executable file.
        marker = unique_marker(script)
        runner = (f'f=$(mktemp) && cat > "$f" <<\'{marker}\'\n{script}{marker}\n'
                  'chmod +x "$f" && "$f"; s=$?; rm -f "$f"; exit $s')
        return exec_form("RUN", flags, ["/bin/sh", "-c", runner])
    text = command + "".join("\n" + "\n".join([*body, terminator]) for _, _, terminator, body in bodies)
    return exec_form("RUN", flags, [*shell, text])


def copy_lines(keyword: str, flags: list[str], command: str,
               bodies: list[tuple[str, bool, str, list[str]]]) -> list[str]:
    words = shlex.split(command.replace("\\\n", " "))
    dest, sources = words[-1], words[:-1]
    plain = [s for s in sources if not HEREDOC.fullmatch(s)]
    lines = [f"{keyword} {' '.join([*flags, *plain, dest])}"] if plain else []
    into_dir = dest.endswith("/") or len(sources) > 1
    options = dict(f[2:].split("=", 1) for f in flags if "=" in f)
    script = []
    for name, quoted, _, body in bodies:
        path = f"{dest.rstrip('/')}/{name}" if into_dir else dest
        marker = unique_marker("\n".join(body))
        delimiter = f"'{marker}'" if quoted else marker
        script.append(f'mkdir -p "$(dirname {shlex.quote(path)})" && cat > {shlex.quote(path)} <<{delimiter}\n'
                      + "".join(line + "\n" for line in body) + f"{marker}\n"
                      + f"chmod {options.get('chmod', '644')} {shlex.quote(path)}")
        if "chown" in options:
            script.append(f"chown {shlex.quote(options['chown'])} {shlex.quote(path)}")
    lines.append(exec_form("RUN", [], ["/bin/sh", "-c", "set -e\n" + "\n".join(script)]))
    return lines


def unique_marker(text: str) -> str:
    marker = "AGENTCOMPASS_EOF"
    while marker in text:
        marker += "_"
    return marker
