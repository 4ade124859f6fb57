"""The modal provider at the SDK boundary: a recording fake SDK (tests/fake_modal.py, set up by
tests/modal_sdk.py) that runs sandboxes for real under bubblewrap, checked against the real SDK's
signatures: what Sandbox.create gets, errors by class, names and tags, scheduling, the name-clash rule,
credentials; plus an opt-in live test (`pytest --run-modal`, needs Modal credentials). Exec, files and a
sandbox's lifetime are in test_modal_sandbox.py, the CLI in test_modal_cli.py, `env check modal` in
test_modal_env_check.py."""

from __future__ import annotations

import inspect
import os
import subprocess
import time
import uuid

import pytest

import fake_modal
from agentcompass.core.errors import InfraError, SandboxLost, UserError
from agentcompass.core.sandbox import SandboxSpec
from modal_sdk import SECRET, calls, live, needs_bwrap, provider, real_modal, spec  # noqa: F401  (fixtures)
from modal_sdk import fake as fake  # noqa: F401,PLC0414  (fixture)

pytestmark = needs_bwrap


# -- the SDK boundary -----------------------------------------------------------------------------
def test_every_sdk_call_binds_to_the_real_signature(fake, real_modal, tmp_path):
    from agentcompass.providers.modal.provider import ModalProvider

    context = tmp_path / "env"
    context.mkdir()
    (context / "Dockerfile").write_text("FROM scratch\nWORKDIR /app\n")
    p = provider()
    box = p.open(spec(build_context=context, image=None))
    box.exec("echo hi", timeout=5)
    (tmp_path / "f.txt").write_text("x")
    box.upload(tmp_path / "f.txt", "/app/f.txt")
    box.download("/app/f.txt", tmp_path / "back.txt")
    assert box.exec("kill -9 $$").exit_code == 137  # asks the sandbox whether it still runs
    box.close()
    p.open(spec("t2")).close()
    p.open(spec("t3"))
    p.open(spec("t3")).close()  # the name is taken: the holder's tags are read
    assert p.cleanup("r") == 0
    assert ModalProvider.readiness({"token_id": "ak-test", "token_secret": SECRET}, live=True).ready
    provider(named_image="published", gpu="A10G", env_variables={"X": "1"}).open(spec("t4")).close()
    real = {
        "Client.from_credentials": (real_modal.Client.from_credentials, True),
        "Client.hello": (real_modal.Client.hello, False),
        "App.lookup": (real_modal.App.lookup, False),
        "Image.from_registry": (real_modal.Image.from_registry, False),
        "Image.from_dockerfile": (real_modal.Image.from_dockerfile, False),
        "Image.from_name": (real_modal.Image.from_name, False),
        "Image.build": (real_modal.Image.build, False),
        "Workspace.hydrate": (real_modal.Workspace.hydrate, False),
        "Workspace.from_context": (real_modal.Workspace.from_context, False),
        "Sandbox.create": (real_modal.Sandbox.create, False),
        "Sandbox.exec": (real_modal.Sandbox.exec, False),
        "Sandbox.terminate": (real_modal.Sandbox.terminate, False),
        "Sandbox.detach": (real_modal.Sandbox.detach, False),
        "Sandbox.list": (real_modal.Sandbox.list, False),
        "Sandbox.poll": (real_modal.Sandbox.poll, False),
        "Sandbox.get_tags": (real_modal.Sandbox.get_tags, False),
        "Sandbox.from_name": (real_modal.Sandbox.from_name, False),
    }
    seen = set()
    for name, args, kwargs in fake_modal.calls:
        function, needs_cls = real[name]
        inspect.signature(function).bind(*((None,) if needs_cls else ()), *args, **kwargs)  # TypeError if wrong
        seen.add(name)
    assert seen == set(real)


def test_create_maps_the_spec_onto_modal(fake, tmp_path):
    context = tmp_path / "environment"
    context.mkdir()
    (context / "Dockerfile").write_text("FROM scratch\nWORKDIR /app\n")
    long_name = "ac-" + "x" * 100
    box = provider().open(SandboxSpec(name=long_name, workdir="/app", build_context=context, cpus=2, memory_mb=1024,
                                      allow_internet=False, env={"A": "1"}, lifetime_s=600,
                                      labels={"agentcompass": "1", "run": "r", "trial": "t.1"}))
    box.close()
    [(_, args, create)] = calls("Sandbox.create")
    assert args == ()
    assert create["image"].what == {"dockerfile": str(context / "Dockerfile"), "context_dir": str(context)}
    # (request, limit): a plain number is only a request on Modal, which a runaway process may exceed. Modal's cpu
    # counts physical cores (2 vCPUs each): the task's 2 vCPUs are 1 core, what docker's --cpus=2 gives it.
    assert (create["cpu"], create["memory"], create["timeout"], create["block_network"]) == ((1, 1), (1024, 1024), 600, True)
    assert create["workdir"] == "/app" and create["env"] == {"A": "1"}
    owner = create["tags"].pop("agentcompass.owner")
    assert create["tags"] == {"agentcompass": "1", "run": "r", "trial": "t.1"}
    assert owner.split("_")[1] == str(os.getpid())  # which process opened it, for the name-clash rule
    assert len(create["name"]) <= 64 and create["name"].startswith("ac-xxx")
    assert create["app"].name == "agentcompass" and create["client"].token_id == "ak-test"
    assert box.has_task_image is True
    assert box.id in box.attach_hint() and "modal shell" in box.attach_hint()


def test_settings_override_the_task(fake):
    box = provider(image="debian:bookworm", cpus=4, memory_mb=8192, timeout_s=90, block_network=False,
                   region="us-east", app_name="mine", idle_timeout_s=30).open(spec(allow_internet=False, cpus=1))
    box.close()
    [(_, _, create)] = calls("Sandbox.create")
    assert create["image"].what == {"registry": "debian:bookworm"}
    assert (create["cpu"], create["memory"], create["timeout"], create["block_network"]) == ((4, 4), (8192, 8192), 90, False)
    assert (create["region"], create["idle_timeout"], create["app"].name) == ("us-east", 30, "mine")
    assert box.has_task_image is False  # a run-wide image holds none of the task's files


def test_the_docs_parameter_table_reaches_sandbox_create(fake):
    """The names of the Modal docs page, as written there."""
    box = provider(named_image="my-published-image", timeout=3600, idle_timeout=120, cpu=4, memory=8192, gpu="H100:2",
                   region="us-east", env_variables={"MODE": "ci"}, app_name="evals", environment_name="dev",
                   ).open(spec(env={"A": "1"}))
    box.close()
    [(_, lookup_args, lookup)] = calls("Image.from_name")
    assert lookup_args == ("my-published-image",) and lookup["environment_name"] == "dev"
    [(_, _, create)] = calls("Sandbox.create")
    assert create["image"].what == {"named": "my-published-image"}
    assert (create["timeout"], create["idle_timeout"], create["cpu"], create["memory"]) == (3600, 120, (4, 4), (8192, 8192))
    assert (create["gpu"], create["region"], create["env"]) == ("H100:2", "us-east", {"A": "1", "MODE": "ci"})
    assert box.has_task_image is False


def test_image_and_named_image_together_are_refused():
    from pydantic import ValidationError

    from agentcompass.providers.modal.provider import ModalProvider

    with pytest.raises(ValidationError, match="not both"):
        ModalProvider.Settings(image="a", named_image="b")


def test_a_missing_named_image_stops_the_run(fake):
    from agentcompass.core.errors import FatalInfraError

    with pytest.raises(FatalInfraError, match="not found"):
        provider(named_image="missing-image").open(spec())


@pytest.mark.parametrize("kind, fatal", [("InvalidError", True), ("PermissionDeniedError", True), ("AuthError", True),
                                         ("NotFoundError", True), ("ServiceError", False),
                                         ("ResourceExhaustedError", False), ("ConnectionError", False)])
def test_errors_are_retried_or_stop_the_run_by_class(fake, monkeypatch, kind, fatal):
    from agentcompass.core.errors import FatalInfraError

    monkeypatch.setenv(fake_modal.FAIL_ENV, kind)
    with pytest.raises((FatalInfraError, InfraError)) as err:
        provider().open(spec())
    assert isinstance(err.value, FatalInfraError) is fatal
    assert err.value.retryable is not fatal and kind in str(err.value) or not fatal


def test_a_failed_image_build_is_reported_once_per_image(fake, tmp_path):
    from agentcompass.core.errors import BuildFailed

    context = tmp_path / "environment"
    context.mkdir()
    (context / "Dockerfile").write_text("FROM scratch\nRUN exit 3\n")
    p = provider()
    with pytest.raises(BuildFailed) as first:
        p.open(spec("a", image=None, build_context=context, log_dir=tmp_path / "a"))
    with pytest.raises(BuildFailed, match="not built again"):
        p.open(spec("b", image=None, build_context=context, log_dir=tmp_path / "b"))
    assert first.value.retryable is False and "build.log" in str(first.value)
    assert "exit 3" in (tmp_path / "a" / "build.log").read_text()
    assert len(calls("Sandbox.create")) == 1


def test_sandbox_names_follow_modals_rule_and_stay_unique(fake):
    from agentcompass.providers.modal.provider import modal_name
    from agentcompass.core.trial import sandbox_name

    names = {modal_name(sandbox_name("run", "tâche-" + "x" * 150, attempt)) for attempt in (1, 2, 3)}
    assert len(names) == 3
    for name in names:
        assert fake_modal._names.is_valid_object_name(name), name  # the SDK's own rule
    assert modal_name("a/b") != modal_name("a:b")
    box = provider().open(spec("tâche"))  # the fake checks the name as the SDK does
    box.close()


def test_the_fake_refuses_what_the_sdk_refuses(fake):
    """Each rule the fake applies is the SDK's own: tags, names and env names it refuses, the fake refuses."""
    p = provider()
    client, app = p._connect()
    image = fake.Image.from_registry("python:3.11-slim")
    for bad in ({"tags": {"agentcompass.owner": "host/1/2/x"}}, {"tags": {"k": "v" * 64}}, {"name": "a" * 65},
                {"env": {"1BAD": "x"}}, {"env": {"A-B": "x"}}):
        with pytest.raises(fake.exception.InvalidError):
            fake.Sandbox.create(**{"app": app, "client": client, "image": image, **bad})


def test_tags_hold_only_modals_characters_and_stay_distinct(fake):
    """Run names and task ids may hold any character; Modal's tag rule is [a-zA-Z0-9._-]{1,63}."""
    from agentcompass.providers.modal.provider import modal_tag

    box = provider().open(SandboxSpec(name="t1", workdir="/app", image="python:3.11-slim",
                                      labels={"agentcompass": "1", "run": "my run/2 ü", "trial": "org/task:" + "x" * 80 + ".1"}))
    box.close()
    [(_, _, create)] = calls("Sandbox.create")
    fake._names.check_tag_dict(create["tags"])  # what the server would refuse (InvalidError, fatal)
    assert create["tags"]["run"] == modal_tag("my run/2 ü") != modal_tag("my run-2 ü")
    assert modal_tag("plain-1.x_y") == "plain-1.x_y"


@pytest.mark.parametrize("slow", [fake_modal.CREATE_DELAY_ENV, fake_modal.SCHEDULE_ENV])
def test_scheduling_is_bounded_by_ready_timeout(fake, monkeypatch, slow):
    """Modal short of capacity: create (or the first command) blocks for 12 s; ready_timeout 2 ends the wait as an
    infra error naming the time waited, and the sandbox made late is terminated, never left running."""
    monkeypatch.setenv(slow, "12")
    started = time.monotonic()
    with pytest.raises(InfraError, match=r"not ready within ready_timeout = 2s \(waited 2\.\d+s"):
        provider(ready_timeout=2).open(spec())
    assert time.monotonic() - started < 10  # the 2 s and a busy machine's overhead, never the 12 s
    # The sandbox made late (12 s on) is terminated as soon as it exists.
    assert fake_modal.wait_until(lambda: calls("Sandbox.terminate"), timeout=30), "the late sandbox was never ended"
    assert fake_modal.wait_until(lambda: not fake_modal.Sandbox.running, timeout=10)


def test_waiting_for_scheduling_is_not_command_time(fake, monkeypatch):
    monkeypatch.setenv(fake_modal.SCHEDULE_ENV, "2")
    box = provider().open(spec())
    result = box.exec("echo ran", timeout=1)
    box.close()
    assert (result.exit_code, result.timed_out, result.stdout) == (0, False, "ran\n")


def test_a_failed_terminate_is_logged_not_raised(fake):
    box = provider().open(spec())

    def refuse(*, wait=False):
        raise fake_modal.exception.ServiceError("unavailable")

    box.sandbox.terminate = refuse
    box.close()  # the sandbox's hard lifetime ends it; a finished trial is not thrown away
    del box.sandbox.terminate


def test_close_terminates_once(fake):
    box = provider().open(spec())
    box.close()
    box.close()
    assert len(calls("Sandbox.terminate")) == 1
    assert fake_modal.Sandbox.running == {}


def test_a_stale_sandbox_of_the_same_trial_is_replaced(fake):
    p = provider()
    old = p.open(spec())
    new = p.open(spec())
    assert [c[1][0] for c in calls("Sandbox.terminate")] == [old.sandbox]
    new.close()


def test_a_live_sibling_holding_the_name_is_never_terminated(fake):
    """Two processes with one run name: the second's trial must not end the first's sandbox."""
    sibling = provider().open(spec())  # another provider: another (live) owner
    with pytest.raises(InfraError, match="held by a live sandbox") as err:
        provider().open(spec())
    assert not isinstance(err.value, SandboxLost)
    assert calls("Sandbox.terminate") == [] and sibling.exec("echo alive").stdout == "alive\n"
    sibling.close()


def test_a_dead_processs_leftover_is_replaced(fake):
    from agentcompass.providers.remote import OWNER_LABEL, process_owner

    child = subprocess.Popen(["sleep", "30"])
    dead_owner = process_owner("x", child.pid)
    child.kill()
    child.wait()
    old = provider().open(spec())
    old.sandbox.tags[OWNER_LABEL] = dead_owner
    new = provider().open(spec())
    assert [c[1][0] for c in calls("Sandbox.terminate")] == [old.sandbox]
    new.close()


# -- credentials ----------------------------------------------------------------------------------
def test_credentials_precedence(fake, monkeypatch, tmp_path):
    from agentcompass.providers.modal.provider import ModalProvider

    toml = tmp_path / "modal.toml"
    toml.write_text('[other]\ntoken_id = "ak-other"\ntoken_secret = "as-other"\n'
                    '[work]\nactive = true\ntoken_id = "ak-file"\ntoken_secret = "as-file"\n')
    monkeypatch.setenv("MODAL_CONFIG_PATH", str(toml))

    def used(**settings) -> tuple:
        fake_modal.reset()
        ModalProvider(**settings).check(spec())
        return calls("Client.from_credentials")[0][1]

    assert used() == ("ak-file", "as-file")
    monkeypatch.setenv("MODAL_TOKEN_ID", "ak-env")
    monkeypatch.setenv("MODAL_TOKEN_SECRET", "as-env")
    assert used() == ("ak-env", "as-env")
    assert used(token_id="ak-config", token_secret="as-config") == ("ak-config", "as-config")


def test_missing_credentials_name_the_three_sources(fake):
    from agentcompass.providers.modal.provider import ModalProvider

    with pytest.raises(UserError) as err:
        ModalProvider().check(spec())
    message = str(err.value)
    assert "\n" not in message
    assert "token_id" in message and "MODAL_TOKEN_ID" in message and "modal.toml" in message
    assert calls("Client.from_credentials") == []


def test_rejected_credentials_are_a_user_error(fake):
    with pytest.raises(UserError, match="rejected"):
        provider(token_id=fake_modal.REJECTED_TOKEN).check(spec())


# -- live Modal (opt in) ----------------------------------------------------------------------------
@pytest.mark.modal
def test_live_modal_sandbox_round_trip(live, tmp_path):
    from agentcompass.providers.modal.provider import ModalProvider

    p = ModalProvider(timeout_s=300)
    s = SandboxSpec(name=f"ac-live-{uuid.uuid4().hex[:8]}", workdir="/app", image="python:3.11-slim",
                    allow_internet=False, labels={"agentcompass": "1", "run": "live-test"})
    p.check(s)
    box = p.open(s)
    try:
        result = box.exec("echo hi; echo err >&2; exit 3")
        assert (result.exit_code, result.stdout, result.stderr) == (3, "hi\n", "err\n")
        started = time.monotonic()
        slow = box.exec("sleep 120", timeout=3)
        assert slow.timed_out and slow.exit_code == 124 and time.monotonic() - started < 60
        (tmp_path / "d").mkdir()
        (tmp_path / "d" / "f.txt").write_text("payload\n")
        box.upload(tmp_path / "d", "/app/d")
        box.download("/app/d", tmp_path / "back")
        assert (tmp_path / "back" / "f.txt").read_text() == "payload\n"
        with pytest.raises(FileNotFoundError):
            box.download("/app/missing", tmp_path / "missing")
    finally:
        box.close()
    assert p.cleanup("live-test") == 0  # nothing of this run is left running
