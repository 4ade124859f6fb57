"""The modal provider: each trial in its own Modal Sandbox, in the cloud.

The image is a run-wide override, the task's registry image (`Image.from_registry`) or the
task's environment/Dockerfile (`Image.from_dockerfile`, cached by Modal per content). A
sandbox shares no filesystem with the orchestrator: commands go through `Sandbox.exec`, files
travel as tar archives through an exec's stdin and stdout (sandbox.py). Modal's own sandbox
`timeout` caps every sandbox's life, so none outlives a crashed run by more than that.
Credentials (see setup.py) go to the SDK as a Client object only. The `modal` SDK is imported inside the
methods that use it, never when the CLI starts.
"""

from __future__ import annotations

import hashlib
import string
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any

from agentcompass.core.errors import BackPressure, BuildFailed, FatalInfraError, InfraError, TrialError, UserError
from agentcompass.core.sandbox import SandboxSpec, common_refusals, refusal, uncapped_storage
from agentcompass.providers.modal.sandbox import ModalSandbox
from agentcompass.providers.modal.settings import MAX_LIFETIME_S, ModalSettings
from agentcompass.providers.modal.setup import (  # noqa: F401  (modal_credentials: re-exported for tests)
    CREDENTIALS_HINT, ModalCredentials, import_modal, modal_credentials, modal_readiness,
)
from agentcompass.providers.remote import OWNER_LABEL, is_leftover, one_line, process_owner

if TYPE_CHECKING:
    import modal

    from agentcompass.core.readiness import Readiness

DEFAULT_LIFETIME_S = 2 * 3600  # when neither the settings nor the task say how long a sandbox may live
MAX_NAME_LEN = 64  # Modal object names: [a-zA-Z0-9_.-], at most 64 characters
NAME_CHARS = frozenset(string.ascii_letters + string.digits + "_.-")  # the SDK's is_valid_object_name
MAX_TAG_LEN = 63  # the SDK's check_tag_dict: keys and values [a-zA-Z0-9._-]{1,63}, the name alphabet
VCPUS_PER_CORE = 2  # Modal's `cpu` counts physical cores, each two vCPUs; docker's --cpus and GCP count vCPUs
MIN_CPU = 0.125  # Modal's smallest (and default) CPU request, in cores
NAME_RELEASE_WAIT_S = 60  # how long a terminating sandbox may keep its name from the next attempt


def modal_name(name: str) -> str:
    """A sandbox name Modal accepts ([a-zA-Z0-9_.-], at most 64 characters), unique per trial: a name
    that had to be changed or cut ends in a hash of the whole original, so two trials never share one."""
    safe = "".join(c if c in NAME_CHARS else "-" for c in name)
    if safe == name and len(name) <= MAX_NAME_LEN:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:16]
    return f"{safe[: MAX_NAME_LEN - len(digest) - 1]}-{digest}"


def modal_tag(text: str) -> str:
    """A tag key or value Modal accepts ([a-zA-Z0-9._-], 1 to 63 characters); one that had to change keeps a
    hash of the original, so two different labels never become the same tag."""
    safe = "".join(c if c in NAME_CHARS else "-" for c in text)
    if safe == text and 0 < len(text) <= MAX_TAG_LEN:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    return f"{safe[: MAX_TAG_LEN - len(digest) - 1]}-{digest}"


def modal_tags(labels: dict[str, str]) -> dict[str, str]:
    return {modal_tag(k): modal_tag(v) for k, v in labels.items()}


def modal_cpu(vcpus: float) -> float:
    """A task's vCPUs (docker's --cpus, GCP's machine types) as Modal cores, so a task gets the same CPU on
    every env (and is billed for what it asked): 2 vCPUs a core, at least Modal's smallest request."""
    return max(MIN_CPU, vcpus / VCPUS_PER_CORE)


class ModalProvider:
    name = "modal"
    extra, extra_modules = "modal", ("modal",)  # checked before a run (registry.check_extra)
    # Pacing defaults (run.env_open_qps / run.provider_limit override them): Modal answers
    # ResourceExhaustedError past a few sandbox creations a second; concurrency is the account's to cap.
    default_open_qps, default_provider_limit = 4.0, None

    Settings = ModalSettings

    def __init__(self, keep: bool = False, **settings: Any) -> None:
        self.settings = self.Settings(**settings)
        self.keep = keep
        self._lock = threading.Lock()
        self._client: "modal.Client | None" = None
        self._app: "modal.App | None" = None
        self._images: dict[str, "modal.Image"] = {}
        self._failed_builds: dict[str, str] = {}  # image key -> the failure, reported once per image
        self._owner = process_owner(uuid.uuid4().hex[:8], sep="_")  # tags our sandboxes, for the name-clash rule
        self.aborting = threading.Event()  # set on Ctrl-C: trials waiting for Modal to schedule give up

    # -- connection ----------------------------------------------------------------------
    def _connect(self) -> tuple["modal.Client", "modal.App"]:
        """One authenticated client and the app, shared by every trial of the run."""
        with self._lock:
            if self._client is None or self._app is None:
                s = self.settings
                credentials = self._credentials()
                if credentials is None:
                    raise UserError(CREDENTIALS_HINT)
                modal = import_modal(credentials)
                try:
                    client = modal.Client.from_credentials(credentials.token_id, credentials.token_secret)
                    self._app = modal.App.lookup(s.app_name, client=client, environment_name=s.environment_name,
                                                 create_if_missing=True)
                except modal.exception.AuthError as exc:
                    raise UserError(f"Modal rejected the credentials from {credentials.source} ({one_line(exc)[:200]}); "
                                    f"{CREDENTIALS_HINT}") from exc
                except modal.exception.InvalidError as exc:  # the SDK's own configuration checks (_check_config)
                    raise UserError(f"the modal SDK refused its configuration ({one_line(exc)[:200]}); "
                                    "run `modal profile activate NAME` or fix ~/.modal.toml") from exc
                except modal.exception.NotFoundError as exc:  # e.g. an environment that does not exist
                    raise UserError(f"Modal cannot find app '{s.app_name}' in environment "
                                    f"'{s.environment_name or 'the default'}' ({one_line(exc)[:200]}); check "
                                    "environment_name (`modal environment list`)") from exc
                except (modal.exception.Error, OSError) as exc:
                    raise UserError(f"cannot reach Modal app '{s.app_name}' ({one_line(exc)[:200]}); "
                                    "check the network, then `agentcompass env check modal`") from exc
                self._client = client
            return self._client, self._app

    def _credentials(self, config_source: str = "") -> ModalCredentials | None:
        s = self.settings
        return modal_credentials(s.token_id and s.token_id.get_secret_value(),
                                 s.token_secret and s.token_secret.get_secret_value(),
                                 config_source or "environments.modal in a --config file")

    @classmethod
    def readiness(cls, settings: dict[str, Any], live: bool, config_source: str = "") -> "Readiness":
        """`env check modal` and `list envs`: the credentials' source and (live) whether Modal accepts them."""
        return modal_readiness(cls(**settings), live, config_source)

    # -- provider protocol ---------------------------------------------------------------
    def check(self, spec: SandboxSpec) -> None:
        """Before the run: the task has an image Modal can use, and Modal accepts the credentials."""
        for field_name, user in spec.users.items():  # Modal's exec has no user to run as
            raise refusal(spec, "modal", f'{field_name} = "{user}"', "commands run as the image's user")
        common_refusals(spec, "modal")
        uncapped_storage(spec, "modal", "Sandbox.create takes no disk size")
        if not (self.settings.image or self.settings.named_image or spec.image or (spec.build_context and (spec.build_context / "Dockerfile").is_file())):
            raise UserError(f"task '{spec.name}' names no image and has no environment/Dockerfile; "
                            "pass one with --env-params '{\"image\": \"NAME\"}'")
        self._connect()

    def interrupt(self) -> None:
        """The run is ending (Ctrl-C, SIGTERM; the scheduler calls this): stop waiting for Modal to schedule."""
        self.aborting.set()

    def open(self, spec: SandboxSpec) -> "ModalSandbox":
        import modal

        client, app = self._connect()
        s = self.settings
        try:
            image, own = self._image_for(spec, client, app)
        except modal.exception.ImageBuildError as exc:
            raise self._build_failed(spec, exc) from exc
        block = s.block_network if s.block_network is not None else not spec.allow_internet
        lifetime = min(int(s.timeout or spec.lifetime_s or DEFAULT_LIFETIME_S), MAX_LIFETIME_S)
        name = modal_name(spec.name)
        cpu: Any = request_and_limit(s.cpu or (modal_cpu(spec.cpus) if spec.cpus else None))
        if cpu is None and spec.cpu_request:  # a request without a limit (the official SWE-bench grading's)
            cpu = modal_cpu(spec.cpu_request)
        create = dict(app=app, name=name, tags=modal_tags({**spec.labels, OWNER_LABEL: self._owner}), image=image,
                      env={**spec.env, **s.env_variables} or None, timeout=lifetime, idle_timeout=s.idle_timeout,
                      workdir=spec.workdir or None, gpu=s.gpu, cpu=cpu,
                      memory=request_and_limit(s.memory or spec.memory_mb), region=s.region,
                      block_network=block, client=client)
        try:
            return self._scheduled(create, spec, own)
        except modal.exception.ImageBuildError as exc:
            raise self._build_failed(spec, exc) from exc
        except modal.exception.Error as exc:
            raise classify(exc, f"cannot create Modal sandbox {name}") from exc

    def _scheduled(self, create: dict[str, Any], spec: SandboxSpec, own: bool) -> "ModalSandbox":
        """Sandbox.create and the first command, together bounded by ready_timeout. Both block while Modal
        looks for capacity (create's RPC, then exec waiting for the sandbox's task), so they run on a helper
        thread; past the bound, or on Ctrl-C, the sandbox is terminated, now or as soon as create returns."""
        s, name = self.settings, create["name"]
        lock = threading.Lock()
        made: list[ModalSandbox] = []
        given_up = threading.Event()
        outcome: list[BaseException | None] = []

        def schedule() -> None:
            try:
                box = ModalSandbox(self._create(create, spec), spec, s, has_task_image=own)
                with lock:
                    made.append(box)
                    late = given_up.is_set()
                if late:
                    box.close()
                    return
                box.wait_ready(s.ready_timeout)
                outcome.append(None)
            except BaseException as exc:  # handed to the trial's thread below
                outcome.append(exc)

        started = time.monotonic()
        helper = threading.Thread(target=schedule, name=f"modal-schedule-{name}", daemon=True)
        helper.start()
        while helper.is_alive() and not self.aborting.is_set() and time.monotonic() - started < s.ready_timeout:
            helper.join(0.2)
        if outcome:
            if outcome[0] is not None:
                raise outcome[0]
            return made[0]
        with lock:
            given_up.set()
            for box in made:
                box.close()
        if self.aborting.is_set():
            raise InfraError("interrupted")
        raise InfraError(f"Modal sandbox {name} was not ready within ready_timeout = {s.ready_timeout}s "
                         f"(waited {time.monotonic() - started:.1f}s for create and its first command): Modal may be "
                         "short of capacity; retried, or raise ready_timeout / lower --task-concurrency")

    def _create(self, create: dict[str, Any], spec: SandboxSpec) -> "modal.Sandbox":
        """Sandbox.create; a name still held is waited for while its sandbox ends (an earlier attempt's, just
        terminated), and replaced when it is this very trial's leftover (a dead earlier process's), never
        when it is a live sibling's."""
        import modal

        s, name = self.settings, create["name"]
        deadline = time.monotonic() + NAME_RELEASE_WAIT_S
        while True:
            try:
                return modal.Sandbox.create(**create)
            except modal.exception.AlreadyExistsError:
                try:
                    holder = modal.Sandbox.from_name(s.app_name, name, environment_name=s.environment_name,
                                                     client=create["client"])
                except modal.exception.NotFoundError:  # it is ending: Modal frees the name once it has
                    if time.monotonic() > deadline:
                        raise InfraError(f"Modal sandbox name {name} was not freed within {NAME_RELEASE_WAIT_S}s")
                    time.sleep(0.5)
                    continue
                if not is_leftover(holder.get_tags(), True, modal_tags(spec.labels), self._owner):
                    raise InfraError(f"Modal sandbox name {name} is held by a live sandbox of another process; is another "
                                     f"run using this run name? end it, or: agentcompass cleanup --env modal --run-name "
                                     f"{spec.labels.get('run', 'NAME')}")
                holder.terminate(wait=True)  # the name is free only once the termination completed

    def _build_failed(self, spec: SandboxSpec, exc: Exception) -> TrialError:
        """An image that failed to build fails every trial that needs it at once, without building again."""
        key = self._image_key(spec)
        log = f"{spec.log_dir / 'build.log'}" if spec.log_dir else "the trial's build.log"
        if spec.log_dir:
            spec.log_dir.mkdir(parents=True, exist_ok=True)
            (spec.log_dir / "build.log").write_text(str(exc), encoding="utf-8")
        message = f"task '{spec.name}': Modal image build failed ({one_line(exc)[:200]}); see {log}"
        if self.settings.image or self.settings.named_image:  # the run-wide image: no task can run
            return FatalInfraError(message)
        with self._lock:
            self._failed_builds[key] = message
        return BuildFailed(message)

    def cleanup(self, run_name: str | None = None) -> int:
        """Terminate sandboxes an earlier run left behind (tagged agentcompass=1 [and run=NAME])."""
        import modal

        client, app = self._connect()
        tags = modal_tags({"agentcompass": "1", **({"run": run_name} if run_name else {})})
        terminated = 0
        for sandbox in modal.Sandbox.list(app_id=app.app_id, tags=tags, client=client):
            try:
                sandbox.terminate()
                terminated += 1
            except modal.exception.NotFoundError:
                continue
        return terminated

    # -- images --------------------------------------------------------------------------
    def _image_key(self, spec: SandboxSpec) -> str:
        s = self.settings
        if s.named_image or s.image or spec.image:
            return f"named:{s.named_image}" if s.named_image else str(s.image or spec.image)
        return f"{spec.build_context} {sorted(spec.build_args.items())}"

    def _image_for(self, spec: SandboxSpec, client: "modal.Client", app: "modal.App") -> tuple["modal.Image", bool]:
        """The image to run, built, and whether it is the task's own (then it already holds the task's files).
        Built here (Image.build), once per image, so that a long build never counts against ready_timeout.

        Precedence: the settings' image or named_image, then the task's registry image (the recipe's
        per-provider override already merged into it), then the task's Dockerfile."""
        import modal

        s = self.settings
        name = s.image or spec.image
        if not (s.named_image or name or spec.build_context):
            raise InfraError(f"sandbox {spec.name} has no image and no Dockerfile to build")
        key = self._image_key(spec)
        with self._lock:
            if key in self._failed_builds:
                raise BuildFailed(f"{self._failed_builds[key]} (not built again)")
            image = self._images.get(key)
        if image is None:
            try:
                if s.named_image:
                    image = modal.Image.from_name(s.named_image, environment_name=s.environment_name, client=client)
                elif name:
                    image = modal.Image.from_registry(name, add_python=s.add_python)
                else:
                    context = spec.build_context
                    image = modal.Image.from_dockerfile(context / "Dockerfile", context_dir=context,
                                                        build_args=spec.build_args, add_python=s.add_python)
                image = image.build(app) or image  # the SDK returns the image itself, now hydrated
            except modal.exception.NotFoundError as exc:
                raise FatalInfraError(f"Modal image '{s.named_image}' not found ({one_line(exc)[:200]}); "
                                      "check named_image and environment_name") from exc
            except modal.exception.ImageBuildError:
                raise
            except modal.exception.Error as exc:
                raise classify(exc, "cannot look up the Modal image") from exc
            with self._lock:
                image = self._images.setdefault(key, image)
        return image, not (s.image or s.named_image)


def request_and_limit(value: float | None) -> Any:
    """Modal reads a plain cpu or memory as a request that a busy process may exceed; a (request, limit)
    pair caps it as docker does (with cpu already in Modal's cores: modal_cpu), so results stay comparable."""
    return None if value is None else (value, value)


TRANSIENT = ("ServiceError", "InternalError", "InternalFailure", "ConnectionError", "ResourceExhaustedError",
             "TimeoutError", "ExecTimeoutError", "SandboxTimeoutError", "ConflictError")
FATAL = ("AuthError", "PermissionDeniedError", "InvalidError", "NotFoundError", "VersionError")


def classify(exc: Exception, what: str) -> TrialError:
    """A Modal error as a trial error by its class: transient ones are retried (InfraError); ones that no
    retry can fix (bad credentials, no permission, an invalid setting, a missing app) stop the run."""
    import modal

    text = f"{what}: {one_line(exc)[:300]}"
    if isinstance(exc, modal.exception.ResourceExhaustedError):  # the account's rate or concurrency limit
        return BackPressure(f"{text}; opening fewer sandboxes at once and waiting")
    if any(isinstance(exc, getattr(modal.exception, n, ())) for n in TRANSIENT):
        return InfraError(text)
    if any(isinstance(exc, getattr(modal.exception, n, ())) for n in FATAL):
        return FatalInfraError(f"{text} ({type(exc).__name__}: not retried; fix the setting or the credentials)")
    return InfraError(text)
