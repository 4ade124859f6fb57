"""Task images built with BuildKit: heredocs, RUN --mount, COPY --chmod, the fallback, and Ctrl-C mid-build."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from agentcompass.providers.docker.heredocs import rewrite_heredocs
from agentcompass.core.sandbox import SandboxSpec

MODERN_DOCKERFILE = """\
FROM {base}
WORKDIR /app
RUN --mount=type=cache,target=/var/cache/ac-test echo cached > /var/cache/ac-test/x && cp /var/cache/ac-test/x /app/cached.txt
COPY --chmod=755 hello.sh /app/hello.sh
RUN <<EOF
echo "from heredoc" > /app/heredoc.txt
echo second line >> /app/heredoc.txt
EOF
RUN cat > /app/stdin.txt <<-END
\tstdin $HOME
\tEND
COPY <<EOF /app/conf/
copied
EOF
COPY --chmod=600 <<'EOF' /app/secret.txt
not $HOME
EOF
RUN <<'EOF'
#!/usr/bin/env python3
open("/app/shebang.txt", "w").write("python ran me\\n")
EOF
RUN echo {nonce} > /app/nonce.txt
"""
EXPECTED = "cached\nfrom heredoc\nsecond line\nstdin /root\ncopied\nnot $HOME\npython ran me\n"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def modern_context(root: Path, base: str) -> Path:
    context = root / "environment"
    context.mkdir(parents=True)
    (context / "Dockerfile").write_text(MODERN_DOCKERFILE.format(base=base, nonce=uuid.uuid4().hex))
    (context / "hello.sh").write_text("#!/bin/sh\necho hi\n")
    (context / "hello.sh").chmod(0o644)
    return context


@pytest.mark.docker
def test_a_dockerfile_with_heredocs_cache_mounts_and_copy_chmod_builds(base_image: str, tmp_path: Path) -> None:
    from agentcompass.providers.docker.provider import DockerProvider

    context = modern_context(tmp_path, base_image)
    provider = DockerProvider()
    box = provider.open(SandboxSpec(name=unique("ac-test-bk"), build_context=context, workdir="/app",
                                    labels={"agentcompass": "1"}, log_dir=tmp_path))
    try:
        done = box.exec("cat cached.txt heredoc.txt stdin.txt conf/EOF secret.txt shebang.txt; "
                        "stat -c %a hello.sh conf/EOF secret.txt")
    finally:
        box.close()
    assert done.exit_code == 0, done.stderr
    assert done.stdout == EXPECTED + "755\n644\n600\n"
    log = (tmp_path / "build.log").read_text()
    assert log.startswith("building agentcompass-task/") and "builder: BuildKit" in log
    # Built once: a second trial of the same context reuses the content-hash tag.
    (tmp_path / "again").mkdir()
    again = provider.open(SandboxSpec(name=unique("ac-test-bk"), build_context=context, log_dir=tmp_path / "again"))
    again.close()
    assert "cached" in (tmp_path / "again" / "build.log").read_text()


@pytest.mark.docker
def test_a_syntax_line_whose_frontend_cannot_be_fetched_builds_with_the_engines_own(base_image: str,
                                                                                     tmp_path: Path) -> None:
    """`# syntax=docker/dockerfile:1` offline: the frontend image is out of reach (no registry here), so the
    build runs again with the engine's built-in frontend, heredocs rewritten where the engine predates them."""
    from agentcompass.providers.docker.provider import DockerProvider

    context = modern_context(tmp_path, base_image)
    dockerfile = context / "Dockerfile"
    # A frontend tag no cache holds, so the engine must try the registry for it.
    dockerfile.write_text(f"# syntax=docker/dockerfile:1.{uuid.uuid4().int % 1000 + 100}\n" + dockerfile.read_text())
    box = DockerProvider().open(SandboxSpec(name=unique("ac-test-syntax"), build_context=context, workdir="/app",
                                            labels={"agentcompass": "1"}, log_dir=tmp_path))
    try:
        done = box.exec("cat cached.txt heredoc.txt stdin.txt conf/EOF secret.txt shebang.txt")
    finally:
        box.close()
    assert done.exit_code == 0, done.stderr
    assert done.stdout == EXPECTED
    assert "building again with the engine's built-in Dockerfile frontend" in (tmp_path / "build.log").read_text()


@pytest.mark.docker
def test_without_buildkit_the_legacy_builder_says_so_and_fails_on_modern_syntax(base_image: str, tmp_path: Path) -> None:
    from agentcompass.core.errors import InfraError
    from agentcompass.providers.docker.provider import DockerProvider

    context = modern_context(tmp_path, base_image)
    with pytest.raises(InfraError, match="docker build of its environment failed"):
        DockerProvider(buildkit=False).open(SandboxSpec(name=unique("ac-test-bk"), build_context=context,
                                                        log_dir=tmp_path))
    assert "builder: the engine's legacy builder (buildkit: false in the settings)" in (tmp_path / "build.log").read_text()


@pytest.mark.docker
def test_ctrl_c_ends_a_build_within_seconds(base_image: str, tmp_path: Path) -> None:
    nonce = uuid.uuid4().hex
    dataset, config_dir = tmp_path / "data", tmp_path / "conf"
    task = dataset / "slow-build"
    for sub in ("environment", "solution", "tests"):
        (task / sub).mkdir(parents=True)
    (task / "task.toml").write_text('version = "1.0"\n')
    (task / "instruction.md").write_text("Do it.\n")
    (task / "environment" / "Dockerfile").write_text(f"FROM {base_image}\nRUN sleep 297 && echo {nonce}\n")
    (task / "solution" / "solve.sh").write_text("true\n")
    (task / "tests" / "test.sh").write_text("true\n")
    (config_dir / "recipes").mkdir(parents=True)
    (config_dir / "recipes" / "slowbuild.yaml").write_text(
        f"name: slowbuild\ndescription: a slow build\nformat: harbor\nsource: {{path: {dataset}}}\n")
    proc = subprocess.Popen([sys.executable, "-m", "agentcompass", "run", "slowbuild", "oracle", "none", "--env", "docker",
                             "--config-dir", str(config_dir), "--results-dir", str(tmp_path / "out")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not building(nonce):  # the RUN step's process is up inside BuildKit
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the build did not start"
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        start = time.monotonic()
        _, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 130, stderr
        assert time.monotonic() - start < 60  # not the build's 297 s
        deadline = time.monotonic() + 15
        while building(nonce):  # the engine cancels the build once its client is gone
            assert time.monotonic() < deadline, "the build's RUN step is still running"
            time.sleep(0.2)
    finally:
        if proc.poll() is None:
            proc.kill()


def building(nonce: str) -> bool:
    return subprocess.run(["pgrep", "-f", nonce], capture_output=True).returncode == 0


# -- the heredoc rewrite for engines older than 23 ---------------------------------------------------------------
def dockerfile(text: str) -> str:
    return textwrap.dedent(text).lstrip()


def test_no_heredoc_means_no_rewrite() -> None:
    assert rewrite_heredocs("FROM x\nRUN echo $((1<<3)) \\\n  && true\n") is None


def test_rewritten_heredocs_keep_flags_other_lines_and_the_shell() -> None:
    rewritten = rewrite_heredocs(dockerfile('''
        FROM x
        SHELL ["/bin/bash", "-c"]
        RUN --mount=type=cache,target=/c \\
            <<EOF
        echo one
        EOF
        ENV A=1
        '''))
    assert rewritten == 'FROM x\nSHELL ["/bin/bash", "-c"]\nRUN --mount=type=cache,target=/c ["/bin/bash", "-c", "echo one\\n"]\nENV A=1\n'


def test_a_run_with_a_command_passes_its_heredocs_to_the_shell() -> None:
    rewritten = rewrite_heredocs(dockerfile('''
        FROM x
        RUN python3 - <<PY > out.txt
        print(1)
        PY
        '''))
    assert rewritten == 'FROM x\nRUN ["/bin/sh", "-c", "python3 - <<PY > out.txt\\nprint(1)\\nPY"]\n'


@pytest.mark.parametrize(("copy", "paths"), [
    ("COPY <<a <<b /etc/app/", ["/etc/app/a", "/etc/app/b"]),
    ("COPY <<a /etc/app.conf", ["/etc/app.conf"]),
])
def test_copy_heredocs_write_each_file(copy: str, paths: list[str], tmp_path: Path) -> None:
    bodies = "".join(f"{name} body\n{name}\n" for name in ("a", "b")[: copy.count("<<")])
    rewritten = rewrite_heredocs(f"FROM x\n{copy}\n{bodies}")
    assert rewritten is not None and rewritten.count("\n") == 2
    # Run the generated shell with the target paths moved under tmp_path: each file gets its body.
    script = json.loads(rewritten.splitlines()[1].removeprefix("RUN "))[2].replace(" /etc/", f" {tmp_path}/etc/")
    subprocess.run(["/bin/sh", "-c", script], check=True)
    for path, name in zip(paths, "ab"):
        assert (tmp_path / path.lstrip("/")).read_text() == f"{name} body\n"
