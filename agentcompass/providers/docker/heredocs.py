"""Dockerfile heredocs (`RUN <<EOF`, `COPY <<EOF dest`) for engines whose Dockerfile frontend predates them.

Engines before Docker 23 build with BuildKit but their built-in Dockerfile frontend rejects
heredocs (a `# syntax=` line would fetch a newer frontend from a registry). The Dockerfile is then
rewritten into plain shell, the way BuildKit itself hands heredocs to the shell.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

HEREDOC = re.compile(r"<<(-?)(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\2")
HEREDOC_ENGINE_MAJOR = 23  # the first engine whose built-in Dockerfile frontend reads heredocs


SYNTAX_LINE = re.compile(r"\A(\s*#\s*syntax\s*=[^\n]*\n?)")


def prepared_dockerfile(original: Path, engine_major: int | None, workdir: Path,
                        builtin_frontend: bool = False) -> tuple[Path, bool]:
    """The Dockerfile to build: the original, or a heredoc-free rewrite in `workdir` for an old engine.
    `builtin_frontend`: without its `# syntax=` line (the frontend it names could not be fetched), so the
    engine's own frontend builds it."""
    text = original.read_text(encoding="utf-8", errors="replace")
    if builtin_frontend:
        text = SYNTAX_LINE.sub("", text)
    elif engine_major is not None and engine_major >= HEREDOC_ENGINE_MAJOR:
        return original, False
    elif SYNTAX_LINE.match(text):
        return original, False  # the Dockerfile names its own frontend
    old_engine = engine_major is None or engine_major < HEREDOC_ENGINE_MAJOR
    rewritten = rewrite_heredocs(text) if old_engine else None
    if rewritten is None and not builtin_frontend:
        return original, False
    path = workdir / "Dockerfile"
    path.write_text(rewritten if rewritten is not None else text, encoding="utf-8")
    return path, rewritten is not None



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
