"""The host-side bundle of a Python CLI: a relocatable CPython with the CLI installed, once per (package, version,
Python), kept in the cache and uploaded into each sandbox like the npm CLIs' binaries (harnesses/cli_bundle.py).

No relocatable CPython is served by the package registries themselves (the standalone builds on PyPI only fetch
from elsewhere at install time), so the bundle is made from a CPython on this machine of the minor version the
CLI needs (on PATH, under pyenv, or named by `python:`): its interpreter, its standard library and the shared
libraries every binary in the tree links, the C library and its dynamic loader included. The loader starts the
interpreter (`ld.so --library-path`), so the task image's own libraries and Python (or none at all) never matter:
any x86_64 Linux image runs it, and the run refuses any other up front. The package is installed into the bundle's
own site-packages by the same interpreter's pip, from PyPI, offline from then on.

Layout (under the sandbox's AGENT_DIR): `py/bin/.python3.X` the interpreter, `py/bin/python3.X` a launcher that is
`sys.executable` (so a CLI that starts Python again gets the bundled one), `py/lib/python3.X/` the standard
library and site-packages, `py/so/` the shared libraries with the loader, `bin/<command>` the CLI. The launchers
pass the loader no environment variable, so nothing of the bundle leaks into the commands the CLI runs.
"""

from __future__ import annotations

import fcntl
import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

import structlog

from agentcompass.core.errors import UserError
from agentcompass.core.paths import cache_root
from agentcompass.harnesses.cli_bundle import BUNDLE, INSTALL_TIMEOUT_S, watched_install

log = structlog.get_logger("agentcompass")
LOADER = "ld-linux-x86-64.so.2"
# Of the standard library, what no CLI runs (tests, the IDE, Tk, the static library): a third of its size.
SKIPPED = ("test", "idlelib", "tkinter", "turtledemo", "site-packages", "dist-packages", "__phello__")
SKIPPED_GLOBS = ("config-3*", "lib2to3/tests")
LDD_LINE = re.compile(r"=>\s+(/\S+)\s+\(0x")


@dataclass(frozen=True)
class HostPython:
    """A CPython on this machine: its interpreter and where its pieces are."""

    executable: Path
    version: str  # "3.12"
    stdlib: Path
    dynload: Path
    libpython: Path | None  # a shared libpython the interpreter links, else None (statically linked)


def find_python(version: str, explicit: str | None = None) -> HostPython:
    """The host CPython of minor `version`: `explicit` when given, else python3.X on PATH, else under pyenv."""
    candidates = [explicit] if explicit else [shutil.which(f"python{version}"), *pyenv_pythons(version)]
    for candidate in filter(None, candidates):
        found = describe(Path(candidate))
        if found is not None and found.version == version:
            return found
    where = f"'{explicit}' is not a CPython {version}" if explicit else f"no python{version} on PATH or under pyenv"
    raise UserError(f"building the bundle needs CPython {version} on this machine ({where}); install it (pyenv install "
                    f"{version}, or your distribution's python{version}), or pass harness.python_path=/path/to/python{version}")


def pyenv_pythons(version: str) -> list[str]:
    """pyenv's CPythons of that minor version, newest first: under PYENV_ROOT, beside the shims on PATH, ~/.pyenv
    (a shim runs only the version pyenv selects, so the versions themselves are looked for)."""
    roots = [os.environ.get("PYENV_ROOT"), os.path.expanduser("~/.pyenv")]
    roots += [os.path.dirname(d) for d in os.environ.get("PATH", "").split(os.pathsep) if d.endswith("/shims")]
    found: list[str] = []
    for root in filter(None, dict.fromkeys(roots)):
        found += sorted(glob.glob(f"{root}/versions/{version}.*/bin/python{version}"), reverse=True)
    return found


def describe(executable: Path) -> HostPython | None:
    probe = ("import json, sys, sysconfig; v = sysconfig.get_config_var; print(json.dumps({'impl': sys.implementation.name,"
             " 'version': '%d.%d' % sys.version_info[:2], 'stdlib': sysconfig.get_paths()['stdlib'],"
             " 'dynload': v('DESTSHARED'), 'libdir': v('LIBDIR'), 'ldlibrary': v('LDLIBRARY')}))")
    try:
        done = subprocess.run([str(executable), "-I", "-c", probe], capture_output=True, text=True, timeout=60)
        facts = json.loads(done.stdout)
    except (OSError, subprocess.SubprocessError, json.JSONDecodeError):
        return None
    if facts["impl"] != "cpython":
        return None
    shared = str(facts.get("ldlibrary") or "")
    libpython = Path(facts["libdir"]) / shared if shared.endswith(".so") or ".so." in shared else None
    linked = LDD_LINE.findall(ldd(Path(os.path.realpath(executable))))
    libpython = next((Path(p) for p in linked if "libpython" in p), libpython if libpython and libpython.exists() else None)
    return HostPython(Path(os.path.realpath(executable)), facts["version"], Path(facts["stdlib"]),
                      Path(facts["dynload"] or Path(facts["stdlib"]) / "lib-dynload"), libpython)


def bundle_dir(requirements: tuple[str, ...], python: str, cache_dir: Path | None = None) -> Path:
    name = "+".join(r.replace("/", "+") for r in requirements) or "bare"
    return (cache_dir or cache_root() / "cli-agents") / f"pypi+{name}+py{python}"


def py_bundle(requirements: tuple[str, ...], python: HostPython, cache_dir: Path | None = None) -> Path:
    """`agent.tar.gz` holding the relocatable interpreter with `requirements` (pinned pip requirements; none: the
    interpreter alone) installed, and `bin/<name>` for every console script they declare. Made once per
    (requirements, Python); a lock lets concurrent runs share one build."""
    root = bundle_dir(requirements, python.version, cache_dir)
    archive = root / BUNDLE
    if archive.is_file():
        return archive
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if archive.is_file():
            return archive
        work = Path(tempfile.mkdtemp(prefix="pypi-", dir=root))
        try:
            tree = work / "agent"
            site = copy_interpreter(python, tree / "py")
            if requirements:
                pip_install(python, list(requirements), site, work / "cache")
                compile_modules(python, site)
            copy_shared_libraries(tree / "py")
            (tree / "bin").mkdir()
            for name, entry in console_scripts(site).items():
                write_launcher(tree / "bin" / name, python.version, cli_entry(entry, name))
            partial = root / f"{BUNDLE}.partial"
            with tarfile.open(partial, "w:gz", compresslevel=1) as tar:
                tar.add(tree, arcname=".")
            partial.rename(archive)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    log.info("Python CLI bundle ready", requirements=" ".join(requirements), python=python.version,
             size_mb=round(archive.stat().st_size / 1e6, 1), path=str(archive))
    return archive


def console_scripts(site: Path) -> dict[str, str]:
    """name -> `module:function` of every console script the installed distributions declare."""
    import configparser

    scripts: dict[str, str] = {}
    for entry_points in sorted(site.glob("*.dist-info/entry_points.txt")):
        parser = configparser.ConfigParser(delimiters=("=",), interpolation=None)
        parser.optionxform = str  # type: ignore[assignment,method-assign]  # names keep their case
        parser.read(entry_points, encoding="utf-8")
        if parser.has_section("console_scripts"):
            scripts.update({k.strip(): v.split("[")[0].strip() for k, v in parser.items("console_scripts")})
    return scripts


def copy_interpreter(python: HostPython, py: Path) -> Path:
    """The interpreter, its libpython and its standard library under `py`; the (empty) site-packages' path."""
    lib = py / "lib" / f"python{python.version}"
    (py / "bin").mkdir(parents=True)
    shutil.copy2(python.executable, py / "bin" / f".python{python.version}")
    if python.libpython is not None:
        (py / "so").mkdir()
        shutil.copy2(os.path.realpath(python.libpython), py / "so" / python.libpython.name)
    # The compiled modules come along (their sources' mtimes too): a CLI's start would compile them in every sandbox.
    ignore = shutil.ignore_patterns(*SKIPPED, *SKIPPED_GLOBS)
    shutil.copytree(python.stdlib, lib, ignore=lambda d, names: ignore(d, names) if d == str(python.stdlib) else set(),
                    symlinks=False)
    if not (lib / "lib-dynload").is_dir():  # Debian keeps it apart from the stdlib's other files
        shutil.copytree(python.dynload, lib / "lib-dynload")
    write_interpreter_launcher(py / "bin" / f"python{python.version}", python.version)
    site = lib / "site-packages"
    site.mkdir()
    return site


def pip_install(python: HostPython, requirements: list[str], site: Path, cache: Path) -> None:
    """The host interpreter's pip installs into the bundle's site-packages (wheels for that very interpreter)."""
    argv = [str(python.executable), "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "--no-compile",
            "--target", str(site), "--cache-dir", str(cache), *requirements]
    code, detail = watched_install(argv, " ".join(requirements), "PyPI", cache,
                                   env={**os.environ, "PIP_REQUIRE_VIRTUALENV": "0", "PYTHONNOUSERSITE": "1"})
    if code != 0:
        raise UserError(f"cannot install {' '.join(requirements)} for Python {python.version}: {detail}; check the "
                        f"version (pip index versions {requirements[0].split('==')[0]}) and the Python it needs")


def compile_modules(python: HostPython, site: Path) -> None:
    """Byte-compile the installed packages once here (the interpreter fixes each code object's file name when it loads
    one from elsewhere); a module that does not compile (a template, a test fixture) stays source only."""
    subprocess.run([str(python.executable), "-I", "-m", "compileall", "-q", "-j", "0", str(site)], capture_output=True,
                   timeout=INSTALL_TIMEOUT_S)


def ldd(path: Path) -> str:
    try:
        return subprocess.run(["ldd", str(path)], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def is_elf(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def copy_shared_libraries(py: Path) -> None:
    """Every shared library a binary of the tree links from outside it (the C library among them) into py/so,
    and the loader that starts the interpreter with them: the image's own libraries are never used."""
    so = py / "so"
    so.mkdir(exist_ok=True)
    needed: dict[str, str] = {}
    for path in py.rglob("*"):
        if path.is_file() and not path.is_symlink() and (path.suffix == ".so" or ".so." in path.name
                                                          or path.name.startswith(".python")) and is_elf(path):
            for found in LDD_LINE.findall(ldd(path)):
                if not Path(found).is_relative_to(py):
                    needed.setdefault(Path(found).name, found)
    loader = next((p for p in ("/lib64/" + LOADER, "/lib/x86_64-linux-gnu/" + LOADER) if os.path.exists(p)), None)
    if loader is None:
        raise UserError(f"this machine has no {LOADER}: the Python CLI bundles are built on x86_64 Linux only")
    needed[LOADER] = loader
    for name, found in needed.items():
        if not (so / name).exists():
            shutil.copy2(os.path.realpath(found), so / name)


def write_interpreter_launcher(path: Path, version: str) -> None:
    """`py/bin/python3.X`: the bundled loader runs the interpreter with the bundled libraries, `--argv0` naming this
    launcher so that it is `sys.executable` and the interpreter finds its prefix beside it."""
    path.write_text("#!/bin/sh\n"
                    'py="$(cd "$(dirname "$0")/.." && pwd)"\n'
                    f'exec "$py/so/{LOADER}" --library-path "$py/so" --argv0 "$py/bin/python{version}" '
                    f'"$py/bin/.python{version}" "$@"\n')
    path.chmod(0o755)


def cli_entry(entry: str, name: str) -> str:
    """The Python that runs console script `name` (`module:function`, the function maybe an attribute path)."""
    module, _, function = entry.partition(":")
    return (f"import functools, importlib, sys; sys.argv[0] = {name!r}; "
            f"sys.exit(functools.reduce(getattr, {function.split('.')!r}, importlib.import_module({module!r}))())")


def write_launcher(path: Path, version: str, code: str) -> None:
    """`bin/<command>`: the CLI's entry point on the bundled interpreter, isolated (-I) from the image's PYTHONPATH
    and user site-packages."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n"
                    f'exec "$(cd "$(dirname "$0")/.." && pwd)/py/bin/python{version}" -I -c {shlex.quote(code)} "$@"\n')
    path.chmod(0o755)
