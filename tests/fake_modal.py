"""A stand-in for the `modal` SDK that records every call and runs sandboxes for real, locally.

Each fake sandbox is a directory used as `/` under bubblewrap (the host's system folders
mounted read-only on top, the host's /proc so a kill by environment mark works across execs),
so commands, tar file transfer and grading all really happen. An image built `from_dockerfile`
is emulated by applying the Dockerfile's WORKDIR, COPY and RUN lines to that root (a failing RUN is
ImageBuildError). Values are checked as the SDK checks them (names, argv length, absolute workdir,
request <= limit, timeout range); an exec timeout ends the exec'd process only, as Modal does.
FAKE_MODAL_CREATE_FAILS="ErrorClass[:N]" makes Sandbox.create raise that error (the first N times);
FAKE_MODAL_SCHEDULE_S=S makes a new sandbox run commands only S seconds after create returns.

The SDK's own code checks what the real SDK checks before the server sees it: tag keys and values
(check_tag_dict), object names, env-variable names, and ~/.modal.toml as it is read at `import modal`
(`imported()`: _read_user_config, then _check_config on every Client.from_credentials); the exception
classes are the SDK's. The shim (`shim_dir()`) makes `import modal` answer with this module.

Every call is appended to `calls` and, when FAKE_MODAL_LOG names a file, to that file as JSON
lines, so a test can read what a CLI subprocess asked of the SDK. FAKE_MODAL_LOSE="A,B" makes
Modal terminate a sandbox mid-command, as a preemption would: the first command of this process
whose text contains A (then B, ...) loses its sandbox half a second after it starts. Only the names the provider
uses exist; their signatures match the real SDK's (tests/test_modal_provider.py checks that).

Longer than 400 lines because one fake of one SDK: App, Image, Sandbox and the process handles share the recorded calls and the sandboxes' state.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import types
from pathlib import Path
from typing import Any, Iterator

from fake_sdk import jsonable

LOG_ENV = "FAKE_MODAL_LOG"
SETUP_TRIES = 5  # bubblewrap set-ups tried per command before its failure stands
LOSE_ENV = "FAKE_MODAL_LOSE"
LOSE_AFTER_S = 0.5
FAIL_ENV = "FAKE_MODAL_CREATE_FAILS"  # "ErrorClass" or "ErrorClass:N": Sandbox.create raises it (the first N times)
SCHEDULE_ENV = "FAKE_MODAL_SCHEDULE_S"  # a new sandbox runs commands only this long after create returns
CREATE_DELAY_ENV = "FAKE_MODAL_CREATE_S"  # Sandbox.create itself takes this long (Modal short of capacity)
ARG_MAX_BYTES = 2**16  # the SDK refuses an exec whose arguments add up to more (InvalidError)
REJECTED_TOKEN = "ak-rejected"  # Client.from_credentials raises AuthError for this token id
SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
HOST_DIRS_SKIPPED = {"proc", "dev", "tmp"}

calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
_lock = threading.Lock()
_lost: set[str] = set()  # FAKE_MODAL_LOSE patterns that already cost a sandbox
_failed_creates = itertools.count()
_reserved: dict[str, float] = {}  # names of sandboxes still terminating -> when they are free
NAME_RELEASE_S = 1.0
_ids = itertools.count(1)


def describe_object(value: Any) -> Any:
    """A fake Modal object (Image, Secret, ...) by its own describe(), as the recorded calls show it."""
    own = getattr(value, "describe", None)
    return own() if callable(own) else str(value)


def record(call: str, /, *args: Any, **kwargs: Any) -> None:
    with _lock:
        calls.append((call, args, kwargs))
        log = os.environ.get(LOG_ENV)
        if log:
            with open(log, "a", encoding="utf-8") as handle:
                handle.write(json.dumps({"call": call, "args": jsonable(args, describe_object), "kwargs": jsonable(kwargs, describe_object),
                                         "t": time.time()}) + "\n")


def reset() -> None:
    with _lock:
        calls.clear()
        _lost.clear()
        Sandbox.running.clear()
        _reserved.clear()
        global _failed_creates
        _failed_creates = itertools.count()


# -- the real SDK's own code, run without importing the SDK (a CLI subprocess has this fake as `modal`) ----------
SDK_ROOT = Path(importlib.util.find_spec("modal_proto").origin).parent.parent / "modal"  # type: ignore[arg-type]


def _real_module(name: str) -> Any:
    """An SDK module whose imports stay inside the SDK (exception, _utils.name_utils), loaded from the
    installed package under another name, so it is the SDK's code whatever `modal` is in this process."""
    if "_real_modal" not in sys.modules:
        package = types.ModuleType("_real_modal")
        package.__path__ = [str(SDK_ROOT)]
        sys.modules["_real_modal"] = package
    return importlib.import_module(f"_real_modal.{name}")


def _sdk_functions(relative: str, names: set[str], namespace: dict[str, Any]) -> dict[str, Any]:
    """The SDK's own functions (and the module constants among `names`) compiled from its source file into
    `namespace`, whose globals they then read: what the SDK runs, without the module's import side effects."""
    tree = ast.parse((SDK_ROOT / relative).read_text(encoding="utf-8"))
    body = [node for node in tree.body
            if (isinstance(node, ast.FunctionDef) and node.name in names)
            or (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in names for t in node.targets))]
    missing = names - {getattr(n, "name", None) or n.targets[0].id for n in body}  # type: ignore[union-attr]
    assert not missing, f"the modal SDK no longer has {missing} in {relative}"
    exec(compile(ast.Module(body=body, type_ignores=[]), str(SDK_ROOT / relative), "exec"), namespace)
    return namespace


exception = _real_module("exception")  # the SDK's exception classes: what the provider catches is real
_names = _real_module("_utils.name_utils")  # check_object_name, check_tag_dict: the SDK's own rules
_sandbox_rules = _sdk_functions("sandbox/_common.py", {"_SECRET_KEYNAME_REGEX", "_validate_sandbox_env"},
                                {"re": re, "InvalidError": exception.InvalidError})
config: dict[str, Any] = {}  # what the SDK read at import: the profiles, the active one, the checks


def imported() -> None:
    """`import modal`: the SDK reads MODAL_CONFIG_PATH (default ~/.modal.toml) now and never again, with its own
    _read_user_config (InvalidError for a file it refuses, raised by the import itself)."""
    path = os.environ.get("MODAL_CONFIG_PATH") or os.path.join(os.path.expanduser("~"), ".modal.toml")
    namespace = _sdk_functions("config.py", {"_read_user_config", "_check_config", "_config_active_profile"}, {
        "os": os, "_is_remote": lambda: False, "user_config_path": path, "InvalidError": exception.InvalidError})
    namespace["_user_config"] = namespace["_read_user_config"]()
    namespace["_profile"] = os.environ.get("MODAL_PROFILE") or namespace["_config_active_profile"]()
    config.clear()
    config.update(namespace)


def setting(name: str) -> Any:
    """modal.config's lookup: MODAL_<NAME>, else the active profile's value."""
    return os.environ.get(f"MODAL_{name.upper()}") or config.get("_user_config", {}).get(config.get("_profile"), {}).get(name)


class Client:
    def __init__(self, token_id: str) -> None:
        self.token_id = token_id

    @classmethod
    def from_credentials(cls, token_id: str, token_secret: str) -> "Client":
        record("Client.from_credentials", token_id, token_secret)
        config["_check_config"]()  # the SDK checks the file it read even for explicit tokens
        if token_id == REJECTED_TOKEN:
            raise exception.AuthError("Token ID is malformed")
        client = cls(token_id)
        client.server_url = setting("server_url") or "default"  # modal.config["server_url"], read at import
        return client

    def hello(self) -> None:
        record("Client.hello", self)

    def describe(self) -> str:
        return f"client:{self.token_id}@{getattr(self, 'server_url', 'default')}"


class App:
    def __init__(self, name: str) -> None:
        self.name = name
        self.app_id = f"ap-{name}"

    @staticmethod
    def lookup(name: str, *, client: Client | None = None, environment_name: str | None = None,
               create_if_missing: bool = False) -> "App":
        record("App.lookup", name, client=client, environment_name=environment_name, create_if_missing=create_if_missing)
        _names.check_object_name(name, "App")
        app = App(name)
        app.environment = environment_name or setting("environment") or "default"  # the SDK's _get_environment_name
        return app

    def describe(self) -> str:
        return f"{self.app_id}@{getattr(self, 'environment', 'default')}"


class Image:
    def __init__(self, **what: Any) -> None:
        self.what = what

    @staticmethod
    def from_registry(tag: str, secret: Any = None, *, add_python: str | None = None, **kwargs: Any) -> "Image":
        record("Image.from_registry", tag, secret, add_python=add_python, **kwargs)
        return Image(registry=tag)

    @staticmethod
    def from_dockerfile(path: str | Path, *, context_dir: str | Path | None = None, build_args: dict[str, str] = {},
                        add_python: str | None = None, **kwargs: Any) -> "Image":
        record("Image.from_dockerfile", path, context_dir=context_dir, build_args=build_args, add_python=add_python,
               **kwargs)
        return Image(dockerfile=str(path), context_dir=str(context_dir))

    @staticmethod
    def from_name(name: str, *, environment_name: str | None = None, client: Client | None = None) -> "Image":
        record("Image.from_name", name, environment_name=environment_name, client=client)
        if name.startswith("missing"):
            raise exception.NotFoundError(f"Image '{name}' not found")
        return Image(named=name)

    def build(self, app: Any = None) -> "Image":
        record("Image.build", self, app)
        return self

    def describe(self) -> dict[str, Any]:
        return self.what


class Stream:
    """A process pipe read as the SDK's StreamReader: iterating yields chunks until EOF."""

    def __init__(self, pipe: Any) -> None:
        self.pipe = pipe

    def __iter__(self) -> Iterator[bytes]:
        while chunk := os.read(self.pipe.fileno(), 65536):
            yield chunk


class Writer:
    """stdin as the SDK's StreamWriter: write buffers, drain flushes, write_eof closes."""

    def __init__(self, pipe: Any) -> None:
        self.pipe = pipe
        self.eof = False

    def write(self, data: bytes | bytearray | memoryview | str) -> None:
        self.pipe.write(data.encode() if isinstance(data, str) else bytes(data))

    def write_eof(self) -> None:
        self.eof = True

    def drain(self) -> None:
        self.pipe.flush()
        if self.eof:
            self.pipe.close()


class ContainerProcess:
    def __init__(self, proc: subprocess.Popen[bytes], timeout: int | None) -> None:
        self.proc = proc
        self.stdout, self.stderr, self.stdin = Stream(proc.stdout), Stream(proc.stderr), Writer(proc.stdin)
        self.killed_at_timeout = False
        if timeout:  # Modal's exec timeout: the server kills the command
            threading.Thread(target=self._kill_after, args=(timeout,), daemon=True).start()

    def _kill_after(self, timeout: int) -> None:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            # Modal ends the exec'd process alone: what it forked is the provider's to kill (by its mark).
            self.killed_at_timeout = True
            self.proc.kill()

    def wait(self) -> int:
        code = self.proc.wait()
        if self.killed_at_timeout:
            return -1  # what the SDK reports for an exec timeout
        return 128 - code if code < 0 else code  # the SDK reports death by signal N as 128 + N


def check_values(name: str | None, workdir: str | None, cpu: Any, memory: Any, timeout: int | None) -> None:
    """The SDK's own checks on values, which a signature alone does not catch."""
    if name is not None:
        _names.check_object_name(name, "Sandbox")
    if workdir is not None and not workdir.startswith("/"):
        raise exception.InvalidError(f"workdir must be an absolute path, got {workdir!r}")
    for what, value in (("CPU", cpu), ("memory", memory)):
        if isinstance(value, tuple) and not (0 < value[0] <= value[1]):
            raise exception.InvalidError(f"Cannot specify a {what} limit lower than request: {value}")
    if timeout is not None and not (0 < timeout <= 24 * 3600):
        raise exception.InvalidError(f"timeout must be between 1 and 86400 seconds, got {timeout}")


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


class Sandbox:
    running: dict[str, "Sandbox"] = {}

    def __init__(self, name: str | None, tags: dict[str, str], workdir: str, env: dict[str, str],
                 block_network: bool) -> None:
        self.object_id = f"sb-fake{next(_ids)}"
        self.name, self.tags, self.workdir, self.env, self.block_network = name, dict(tags), workdir, env, block_network
        self.root = Path(tempfile.mkdtemp(prefix="fake-modal-"))
        (self.root / "tmp").mkdir()
        (self.root / workdir.lstrip("/")).mkdir(parents=True, exist_ok=True)
        self.procs: set[subprocess.Popen[bytes]] = set()
        self.terminated = False
        self.ready_at = 0.0

    @staticmethod
    def create(*args: str, app: App | None = None, name: str | None = None, tags: dict[str, str] | None = None,
               image: Image | None = None, env: dict[str, str | None] | None = None, timeout: int | None = 300,
               idle_timeout: int | None = None, workdir: str | None = None, gpu: str | None = None,
               region: str | None = None, cpu: float | tuple[float, float] | None = None,
               memory: int | tuple[int, int] | None = None, block_network: bool = False,
               client: Client | None = None, **kwargs: Any) -> "Sandbox":
        record("Sandbox.create", *args, app=app, name=name, tags=tags, image=image, env=env, timeout=timeout,
               idle_timeout=idle_timeout, workdir=workdir, gpu=gpu, region=region, cpu=cpu, memory=memory,
               block_network=block_network, client=client, **kwargs)
        if app is None or client is None or image is None:
            raise exception.Error("the provider must pass app, client and image")
        check_values(name, workdir, cpu, memory, timeout)
        # What the server applies to tags (the SDK's own rule, check_tag_dict) and to env names (the SDK's).
        _names.check_tag_dict(tags or {})
        _sandbox_rules["_validate_sandbox_env"]({k: v for k, v in (env or {}).items() if v is not None})
        time.sleep(float(os.environ.get(CREATE_DELAY_ENV) or 0))
        failure = os.environ.get(FAIL_ENV, "")
        if failure:
            kind, _, times = failure.partition(":")
            if not times or next(_failed_creates) < int(times):
                raise getattr(exception, kind)(f"fake {kind}")
        with _lock:
            if name and (any(s.name == name for s in Sandbox.running.values())
                         or _reserved.get(name, 0) > time.monotonic()):
                raise exception.AlreadyExistsError(f"sandbox {name} already exists")
        sandbox = Sandbox(name, tags or {}, workdir or "/", {k: v for k, v in (env or {}).items() if v}, block_network)
        sandbox._build(image)
        sandbox.ready_at = time.monotonic() + float(os.environ.get(SCHEDULE_ENV) or 0)
        with _lock:
            Sandbox.running[sandbox.object_id] = sandbox
        return sandbox

    def _build(self, image: Image) -> None:
        """Emulate the image: a Dockerfile's WORKDIR, COPY and RUN lines applied to the root."""
        dockerfile = image.what.get("dockerfile")
        if not dockerfile:
            return
        context, workdir = Path(image.what["context_dir"]), "/"
        for line in Path(dockerfile).read_text().splitlines():
            word, _, rest = line.strip().partition(" ")
            if word == "WORKDIR":
                workdir = rest.strip()
                (self.root / workdir.lstrip("/")).mkdir(parents=True, exist_ok=True)
            elif word == "COPY":
                source, target = rest.split()
                shutil.copytree(context / source, self.root / target.lstrip("/"), dirs_exist_ok=True, symlinks=True)
            elif word == "RUN":
                proc = self._popen(("bash", "-c", rest), workdir, {})
                out, err = proc.communicate()
                if proc.returncode != 0:
                    raise exception.ImageBuildError(f"image build failed at {line!r}: {err.decode()}", "im-fake")

    def _popen(self, args: tuple[str, ...], cwd: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
        """Start args in the sandbox. bubblewrap can fail to set the sandbox up when a host mount changes under
        its read-only binds (a docker build's buildkit mount under /var, from another test): the command never
        ran, which Modal never does, so that try is made again. The command tells it began on a pipe."""
        argv = ["bwrap", "--die-with-parent", "--bind", str(self.root), "/"]
        for entry in sorted(os.listdir("/")):
            host = Path("/") / entry
            if entry in HOST_DIRS_SKIPPED:
                continue
            if host.is_symlink():
                if not (self.root / entry).is_symlink():  # an earlier exec left it in the root
                    argv += ["--symlink", os.readlink(host), str(host)]
            elif host.is_dir():
                argv += ["--ro-bind", str(host), str(host)]
        argv += ["--proc", "/proc", "--dev", "/dev", "--chdir", cwd, "--clearenv"]
        if self.block_network:
            argv.append("--unshare-net")
        for key, value in {"PATH": SANDBOX_PATH, "HOME": "/tmp", "LANG": "C.UTF-8", **self.env, **env}.items():
            argv += ["--setenv", key, value]
        for _ in range(SETUP_TRIES):
            began_r, began_w = os.pipe()
            started = ("/bin/bash", "-c", f'printf x >&{began_w}; exec {began_w}>&-; exec "$@"', "bash", *args)
            proc = subprocess.Popen([*argv, *started], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, start_new_session=True, pass_fds=(began_w,))
            os.close(began_w)
            with os.fdopen(began_r, "rb") as began:
                if began.read(1):
                    return proc
            proc.wait()  # bwrap's own failure
            time.sleep(0.1)
        return proc

    def exec(self, *args: str, stdout: Any = None, stderr: Any = None, timeout: int | None = None,
             workdir: str | None = None, env: dict[str, str | None] | None = None, text: bool = True,
             **kwargs: Any) -> ContainerProcess:
        record("Sandbox.exec", self, *args, stdout=stdout, stderr=stderr, timeout=timeout, workdir=workdir, env=env,
               text=text, **kwargs)
        if self.terminated:
            raise exception.Error("Sandbox has already terminated")
        assert text is False, "the provider reads bytes"
        if sum(len(a) for a in args) > ARG_MAX_BYTES:
            raise exception.InvalidError(f"Total length of CMD arguments cannot exceed {ARG_MAX_BYTES} bytes (ARG_MAX)")
        if workdir is not None and not workdir.startswith("/"):
            raise exception.InvalidError(f"workdir must be an absolute path, got {workdir!r}")
        time.sleep(max(0.0, self.ready_at - time.monotonic()))  # not scheduled yet: the first exec waits
        proc = self._popen(args, workdir or self.workdir, {k: v for k, v in (env or {}).items() if v is not None})
        self.procs.add(proc)
        self._maybe_lose(" ".join(args))
        return ContainerProcess(proc, timeout)

    def _maybe_lose(self, command: str) -> None:
        """FAKE_MODAL_LOSE: Modal ends this sandbox under a running command, once per listed pattern."""
        with _lock:
            pattern = next((p for p in os.environ.get(LOSE_ENV, "").split(",") if p and p in command and p not in _lost), None)
            if pattern:
                _lost.add(pattern)
        if pattern:
            threading.Timer(LOSE_AFTER_S, self._end).start()

    def _end(self) -> None:
        """The sandbox ends by Modal's doing (not a terminate() call of the provider): nothing is recorded."""
        self.terminated = True
        for proc in list(self.procs):
            kill_group(proc)
        with _lock:
            Sandbox.running.pop(self.object_id, None)

    def terminate(self, *, wait: bool = False) -> None:
        record("Sandbox.terminate", self, wait=wait)
        self._end()
        shutil.rmtree(self.root, ignore_errors=True)
        if not wait and self.name:  # Modal frees the name only once the termination has completed
            with _lock:
                _reserved[self.name] = time.monotonic() + NAME_RELEASE_S

    def poll(self) -> int | None:
        record("Sandbox.poll", self)
        return self.returncode

    @property
    def returncode(self) -> int | None:
        return 137 if self.terminated else None  # the SDK's code for a terminated sandbox

    def get_tags(self) -> dict[str, str]:
        record("Sandbox.get_tags", self)
        return dict(self.tags)

    def detach(self) -> None:
        record("Sandbox.detach", self)

    @staticmethod
    def list(*, app_id: str | None = None, tags: dict[str, str] | None = None,
             client: Client | None = None) -> Iterator["Sandbox"]:
        record("Sandbox.list", app_id=app_id, tags=tags, client=client)
        with _lock:
            found = [s for s in Sandbox.running.values() if (tags or {}).items() <= s.tags.items()]
        yield from found

    @staticmethod
    def from_name(app_name: str, name: str, *, environment_name: str | None = None, include_terminated: bool = False,
                  client: Client | None = None) -> "Sandbox":
        record("Sandbox.from_name", app_name, name, environment_name=environment_name, client=client)
        with _lock:
            for sandbox in Sandbox.running.values():
                if sandbox.name == name:
                    return sandbox
        raise exception.NotFoundError(name)

    def describe(self) -> str:
        return self.object_id


# What a time.sleep-free poll of "is it gone yet" needs in tests.
def wait_until(predicate: Any, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


# -- workspace billing (agentcompass report --bill modal) ------------------------------------------
BILLING_ENV = "FAKE_MODAL_BILLING"  # a JSON list of report rows (interval_start ISO, cost text, ...)


class Workspace:
    WORKSPACE = "fake-workspace"

    def __init__(self, client: Client | None) -> None:
        self.client = client
        self.billing = WorkspaceBillingManager(self)
        self.name: str | None = None  # the SDK's: None until hydrated (WorkspaceNameLookup)

    def hydrate(self, client: Client | None = None) -> "Workspace":
        record("Workspace.hydrate", self, client=client)
        self.name = self.WORKSPACE
        return self

    def describe(self) -> str:
        return f"workspace:{self.name}"

    @staticmethod
    def from_context(*, client: Client | None = None) -> "Workspace":
        record("Workspace.from_context", client=client)
        return Workspace(client)


class WorkspaceBillingManager:
    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace

    def report(self, *, start: Any, end: Any = None, resolution: str = "d",
               tag_names: list[str] | None = None) -> list[dict[str, Any]]:
        """The rows of FAKE_MODAL_BILLING whose interval starts in [start, end), as the SDK's items."""
        from datetime import datetime
        from decimal import Decimal

        record("WorkspaceBillingManager.report", start=start.isoformat(), end=end and end.isoformat(),
               resolution=resolution, tag_names=tag_names)
        rows = json.loads(Path(os.environ[BILLING_ENV]).read_text()) if os.environ.get(BILLING_ENV) else []
        items = []
        for row in rows:
            begins = datetime.fromisoformat(row["interval_start"])
            if start <= begins and (end is None or begins < end):
                items.append({"object_id": row.get("object_id", "ap-x"), "description": row["description"],
                              "environment_name": "main", "interval_start": begins, "cost": Decimal(row["cost"]),
                              "cost_by_resource": {}, "tags": dict(row.get("tags") or {})})
        return items


SHIM = "import sys\n\nimport fake_modal\n\nfake_modal.imported()  # what the SDK reads at import\nsys.modules[__name__] = fake_modal\n"


def shim_dir(root: Path) -> Path:
    """A directory to put first on sys.path (or PYTHONPATH): its `modal` package is this fake, imported afresh."""
    package = root / "modal"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(SHIM)
    return root
