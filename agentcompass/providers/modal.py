"""The modal provider: each trial in its own Modal Sandbox, in the cloud.

The image is a run-wide override, the task's registry image (`Image.from_registry`) or the
task's environment/Dockerfile (`Image.from_dockerfile`, cached by Modal per content). A
sandbox shares no filesystem with the orchestrator: commands go through `Sandbox.exec`, files
travel as tar archives through an exec's stdin and stdout. Modal's own sandbox `timeout` caps
every sandbox's life, so none outlives a crashed run by more than that. Credentials come from
a private `--config` (environments.modal.token_id/token_secret), then MODAL_TOKEN_ID and
MODAL_TOKEN_SECRET, then ~/.modal.toml, and go to the SDK as a Client object only. The
`modal` SDK is imported inside the methods that use it, never when the CLI starts.
"""

from __future__ import annotations

import hashlib
import math
import os
import tarfile
import tempfile
import threading
import time
import tomllib
import uuid
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from pydantic import SecretStr

from agentcompass.errors import InfraError, UserError
from agentcompass.providers.remote import (
    DRAIN_AFTER_KILL_S, EXEC_MARK, KILL_MARKED, OWNER_LABEL, RemoteSandbox, extract_renamed,
    is_leftover, one_line, process_owner, upload_archive,
)
from agentcompass.sandbox import DEFAULT_OUTPUT_CAP, ExecResult, SandboxSpec, cap_output, common_refusals, refusal
from agentcompass.schema import Positive, PositiveInt, Strict

if TYPE_CHECKING:
    import modal

DEFAULT_LIFETIME_S = 2 * 3600  # when neither the settings nor the task say how long a sandbox may live
MAX_LIFETIME_S = 24 * 3600  # Modal's own ceiling for a sandbox's timeout
MAX_NAME_LEN = 64  # Modal object names: [a-zA-Z0-9_.-], at most 64 characters
MISSING_EXIT = 44  # the download script's exit code for a path that does not exist
UPLOAD_CHUNK = 1024 * 1024
CREDENTIALS_HINT = ("no Modal credentials: set environments.modal.token_id and token_secret in a private --config file, "
                    "or MODAL_TOKEN_ID and MODAL_TOKEN_SECRET, or run `modal token new` (~/.modal.toml)")
# Tar up $1 from its parent directory, so the archive's top entry is its basename.
DOWNLOAD_SCRIPT = f'test -e "$1" || exit {MISSING_EXIT}; cd "$(dirname "$1")" && exec tar -cf - "$(basename "$1")"'


def modal_credentials(token_id: str | None, token_secret: str | None) -> tuple[str, str] | None:
    """(token_id, token_secret) from the first source that has both: config, environment, ~/.modal.toml."""
    if token_id and token_secret:
        return token_id, token_secret
    env_id, env_secret = os.environ.get("MODAL_TOKEN_ID"), os.environ.get("MODAL_TOKEN_SECRET")
    if env_id and env_secret:
        return env_id, env_secret
    path = Path(os.environ.get("MODAL_CONFIG_PATH") or Path.home() / ".modal.toml")
    try:
        profiles = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return None
    wanted = os.environ.get("MODAL_PROFILE")
    chosen = [p for name, p in profiles.items() if isinstance(p, dict) and (name == wanted if wanted else p.get("active"))]
    if not chosen and not wanted:
        chosen = [p for p in profiles.values() if isinstance(p, dict)][:1]  # one profile, none marked active
    if chosen and chosen[0].get("token_id") and chosen[0].get("token_secret"):
        return str(chosen[0]["token_id"]), str(chosen[0]["token_secret"])
    return None


def modal_name(name: str) -> str:
    """A sandbox name Modal accepts, unique per trial: long names keep a hash of the whole."""
    name = "".join(c if c.isalnum() or c in "_.-" else "-" for c in name)
    if len(name) <= MAX_NAME_LEN:
        return name
    return f"{name[: MAX_NAME_LEN - 17]}-{hashlib.sha256(name.encode()).hexdigest()[:16]}"


class ModalProvider:
    name = "modal"
    extra, extra_modules = "modal", ("modal",)  # checked before a run (registry.check_extra)

    class Settings(Strict):
        app_name: str = "agentcompass"  # the Modal app the sandboxes belong to (created when missing)
        environment_name: str | None = None  # Modal environment; default: the profile's
        image: str | None = None  # run-wide registry image for every task, instead of the task's own
        add_python: str | None = None  # e.g. "3.11": let Modal add Python to an image without it
        cpus: Positive | None = None  # overrides the task's cpus
        memory_mb: PositiveInt | None = None  # overrides the task's memory
        region: str | None = None
        timeout_s: PositiveInt | None = None  # hard cap on a sandbox's life; default the task's, else 2 h
        idle_timeout_s: PositiveInt | None = None  # Modal ends a sandbox idle this long
        block_network: bool | None = None  # default: blocked when the task disallows internet
        token_id: SecretStr | None = None
        token_secret: SecretStr | None = None
        shell: str = "bash"  # runs every exec'd command: SHELL -c CMD
        output_cap_bytes: PositiveInt = DEFAULT_OUTPUT_CAP

    def __init__(self, keep: bool = False, **settings: Any) -> None:
        self.settings = self.Settings(**settings)
        self.keep = keep
        self._lock = threading.Lock()
        self._client: "modal.Client | None" = None
        self._app: "modal.App | None" = None
        self._images: dict[str, "modal.Image"] = {}
        self._owner = process_owner(uuid.uuid4().hex[:8])  # tags our sandboxes, for the name-clash rule

    # -- connection ----------------------------------------------------------------------
    def _connect(self) -> tuple["modal.Client", "modal.App"]:
        """One authenticated client and the app, shared by every trial of the run."""
        import modal

        with self._lock:
            if self._client is None or self._app is None:
                s = self.settings
                credentials = modal_credentials(s.token_id and s.token_id.get_secret_value(),
                                                s.token_secret and s.token_secret.get_secret_value())
                if credentials is None:
                    raise UserError(CREDENTIALS_HINT)
                try:
                    client = modal.Client.from_credentials(*credentials)
                    self._app = modal.App.lookup(s.app_name, client=client, environment_name=s.environment_name,
                                                 create_if_missing=True)
                except modal.exception.AuthError as exc:
                    raise UserError(f"Modal rejected the credentials ({one_line(exc)[:200]}); {CREDENTIALS_HINT}") from exc
                except (modal.exception.Error, OSError) as exc:
                    raise UserError(f"cannot reach Modal app '{s.app_name}' ({one_line(exc)[:200]}); "
                                    "check the network and `modal token` setup") from exc
                self._client = client
            return self._client, self._app

    # -- provider protocol ---------------------------------------------------------------
    def check(self, spec: SandboxSpec) -> None:
        """Before the run: the task has an image Modal can use, and Modal accepts the credentials."""
        for field_name, user in spec.users.items():  # Modal's exec has no user to run as
            raise refusal(spec, "modal", f'{field_name} = "{user}"', "commands run as the image's user")
        common_refusals(spec, "modal")
        if not (self.settings.image or spec.image or (spec.build_context and (spec.build_context / "Dockerfile").is_file())):
            raise UserError(f"task '{spec.name}' names no image and has no environment/Dockerfile; "
                            "pass one with --env-params '{\"image\": \"NAME\"}'")
        self._connect()

    def open(self, spec: SandboxSpec) -> "ModalSandbox":
        import modal

        client, app = self._connect()
        image, own = self._image_for(spec)
        s = self.settings
        block = s.block_network if s.block_network is not None else not spec.allow_internet
        lifetime = min(int(s.timeout_s or spec.lifetime_s or DEFAULT_LIFETIME_S), MAX_LIFETIME_S)
        name = modal_name(spec.name)
        create = dict(app=app, name=name, tags={**spec.labels, OWNER_LABEL: self._owner}, image=image,
                      env=dict(spec.env) or None, timeout=lifetime, idle_timeout=s.idle_timeout_s, workdir=spec.workdir or None,
                      cpu=s.cpus or spec.cpus, memory=s.memory_mb or spec.memory_mb, region=s.region,
                      block_network=block, client=client)
        try:
            try:
                sandbox = modal.Sandbox.create(**create)
            except modal.exception.AlreadyExistsError:
                # Only this very trial's leftover (a dead earlier process's) is replaced; never a live sibling's.
                holder = modal.Sandbox.from_name(s.app_name, name, environment_name=s.environment_name, client=client)
                if not is_leftover(holder.get_tags(), True, spec.labels, self._owner):
                    raise InfraError(f"Modal sandbox name {name} is held by a live sandbox of another process; is another "
                                     f"run using this run name? end it, or: agentcompass cleanup --env modal --run-name "
                                     f"{spec.labels.get('run', 'NAME')}")
                holder.terminate()
                sandbox = modal.Sandbox.create(**create)
        except modal.exception.Error as exc:
            raise InfraError(f"cannot create Modal sandbox {name}: {one_line(exc)[:300]}") from exc
        return ModalSandbox(sandbox, spec, s, has_task_image=own)

    def cleanup(self, run_name: str | None = None) -> int:
        """Terminate sandboxes an earlier run left behind (tagged agentcompass=1 [and run=NAME])."""
        import modal

        client, app = self._connect()
        tags = {"agentcompass": "1", **({"run": run_name} if run_name else {})}
        terminated = 0
        for sandbox in modal.Sandbox.list(app_id=app.app_id, tags=tags, client=client):
            try:
                sandbox.terminate()
                terminated += 1
            except modal.exception.NotFoundError:
                continue
        return terminated

    # -- images --------------------------------------------------------------------------
    def _image_for(self, spec: SandboxSpec) -> tuple["modal.Image", bool]:
        """The image to run and whether it is the task's own (then it already holds the task's files)."""
        import modal

        name = self.settings.image or spec.image
        if name is None and spec.build_context is None:
            raise InfraError(f"sandbox {spec.name} has no image and no Dockerfile to build")
        key = name or str(spec.build_context)
        with self._lock:
            image = self._images.get(key)
            if image is None:
                add_python = self.settings.add_python
                if name:
                    image = modal.Image.from_registry(name, add_python=add_python)
                else:
                    context = spec.build_context
                    image = modal.Image.from_dockerfile(context / "Dockerfile", context_dir=context, add_python=add_python)
                self._images[key] = image
        return image, self.settings.image is None


class ModalSandbox(RemoteSandbox):
    def __init__(self, sandbox: "modal.Sandbox", spec: SandboxSpec, settings: ModalProvider.Settings,
                 has_task_image: bool = True) -> None:
        super().__init__(spec, settings, has_task_image)
        self.sandbox = sandbox
        self.id = sandbox.object_id

    def attach_hint(self) -> str:
        return (f"modal shell {self.id}   (it ends by itself after its timeout; end it now with: "
                f"agentcompass cleanup --env modal)")

    # -- exec ----------------------------------------------------------------------------
    def exec(
        self, cmd: str, *, cwd: str | None = None, env: dict[str, str] | None = None, timeout: float | None = None,
        user: str | None = None,
    ) -> ExecResult:
        mark = uuid.uuid4().hex
        start = time.monotonic()
        # Modal kills the command at its exec timeout; the kill below also catches what it forked.
        process = self._start(self.settings.shell, "-c", cmd, workdir=cwd or self.spec.workdir or None,
                              env={**(env or {}), EXEC_MARK: mark}, timeout=math.ceil(timeout) if timeout else None)
        keep = self.settings.output_cap_bytes + 1  # one byte more than the cap, so cap_output marks the cut
        stdout, stderr = bytearray(), bytearray()
        readers = [threading.Thread(target=read_capped, args=(stream, buffer, keep), daemon=True)
                   for stream, buffer in ((process.stdout, stdout), (process.stderr, stderr))]
        for reader in readers:
            reader.start()
        deadline = start + timeout if timeout else None
        for reader in readers:
            reader.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        timed_out = any(reader.is_alive() for reader in readers)
        if timed_out:
            self._kill_marked(mark)
            for reader in readers:
                reader.join(DRAIN_AFTER_KILL_S)
            code = 124
        else:
            code = self._wait(process)
            self._check_exit(code)  # a sandbox that died under the command: not the command's verdict
            # Modal's own exec timeout ended it first: wait() reports -1 for that.
            if timeout and code == -1:
                timed_out, code = True, 124
                self._kill_marked(mark)
        cap = self.settings.output_cap_bytes
        return ExecResult(code, cap_output(bytes(stdout), cap), cap_output(bytes(stderr), cap), timed_out,
                          time.monotonic() - start)

    def _start(self, *args: str, **kwargs: Any) -> Any:
        import modal

        if self._closed:
            raise InfraError("sandbox is closed")
        try:
            return self.sandbox.exec(*args, text=False, **kwargs)
        except modal.exception.Error as exc:
            raise self._failure(f"exec in Modal sandbox {self.id} failed", exc) from exc

    def _wait(self, process: Any) -> int:
        import modal

        try:
            return int(process.wait())
        except modal.exception.Error as exc:
            raise self._failure(f"exec in Modal sandbox {self.id} vanished", exc) from exc

    def _lost(self) -> str | None:
        """None while the sandbox runs; else how it ended (terminated, past its timeout, gone)."""
        import modal

        try:
            code = self.sandbox.poll()
        except (modal.exception.NotFoundError, modal.exception.SandboxTerminatedError):
            return f"Modal sandbox {self.id} no longer exists"
        except modal.exception.Error:
            return None  # Modal is hard to reach, which says nothing about the sandbox: an ordinary infra error
        return None if code is None else f"Modal sandbox {self.id} has ended (exit code {code})"

    def _kill_marked(self, mark: str) -> None:
        import modal

        try:
            killer = self.sandbox.exec("/bin/sh", "-c", KILL_MARKED, f"{EXEC_MARK}={mark}", text=False, timeout=60)
            killer.wait()
        except modal.exception.Error:
            pass  # the sandbox is gone: so is the command

    # -- files ---------------------------------------------------------------------------
    def upload(self, local: Path, remote: str) -> None:
        """Copy a file or a directory's contents to `remote`, creating parent directories."""
        import modal

        with tempfile.SpooledTemporaryFile(max_size=16 * 1024 * 1024) as spool:
            upload_archive(local, remote, spool)
            process = self._start("tar", "-xf", "-", "-C", "/")
            try:
                while chunk := spool.read(UPLOAD_CHUNK):
                    process.stdin.write(chunk)
                    process.stdin.drain()
                process.stdin.write_eof()
                process.stdin.drain()
            except modal.exception.Error as exc:
                raise self._failure(f"upload of {local} to {remote} failed", exc) from exc
        error = bytearray()
        read_capped(process.stderr, error, 4096)
        code = self._wait(process)
        if code != 0:
            self._raise_if_lost()
            raise InfraError(f"upload of {local} to {remote} failed (tar exit {code}): {one_line(error.decode(errors='replace'))[:300]}")

    def download(self, remote: str, local: Path) -> None:
        """Copy `remote` (a file, or a directory's contents) to `local`; FileNotFoundError when it is missing."""
        import modal

        process = self._start(self.settings.shell, "-c", DOWNLOAD_SCRIPT, "download", str(PurePosixPath(remote)))
        with tempfile.SpooledTemporaryFile(max_size=16 * 1024 * 1024) as spool:
            try:
                for chunk in process.stdout:
                    spool.write(chunk)
            except modal.exception.Error as exc:
                raise self._failure(f"download of {remote} failed", exc) from exc
            code = self._wait(process)
            if code == MISSING_EXIT:
                raise FileNotFoundError(remote)
            if code != 0:
                self._raise_if_lost()
                error = bytearray()
                read_capped(process.stderr, error, 4096)
                raise InfraError(f"download of {remote} failed (tar exit {code}): {one_line(error.decode(errors='replace'))[:300]}")
            spool.seek(0)
            with tarfile.open(fileobj=spool, mode="r") as archive:
                extract_renamed(archive, local)

    def close(self) -> None:
        """Terminate the sandbox; nothing else. Safe to call twice, from any thread."""
        import modal

        if not self._close_once():
            return
        try:
            self.sandbox.terminate()
        except modal.exception.NotFoundError:
            pass
        except modal.exception.Error as exc:
            raise InfraError(f"cannot terminate Modal sandbox {self.id}: {one_line(exc)[:300]}") from exc
        finally:
            try:
                self.sandbox.detach()  # frees the client's connection to it
            except Exception:  # detaching is local bookkeeping: never worth failing a trial for
                pass


def read_capped(stream: Any, buffer: bytearray, keep: int) -> None:
    """Read a stream to its end, keeping at most `keep` bytes (the rest is read and dropped)."""
    try:
        for chunk in stream:
            if isinstance(chunk, str):
                chunk = chunk.encode()
            if len(buffer) < keep:
                buffer += chunk[: keep - len(buffer)]
    except Exception:  # the sandbox went away mid-stream: keep what arrived
        pass
