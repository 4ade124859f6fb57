"""The modal provider at the SDK boundary: a recording fake SDK (tests/fake_modal.py) that runs
sandboxes for real under bubblewrap, checked against the real SDK's signatures; plus opt-in live
tests (`pytest --run-modal`, needs Modal credentials)."""

from __future__ import annotations

import inspect
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

import fake_modal
from agentcompass.core.task import LIFETIME_MARGIN_S, Task
from agentcompass.core.errors import InfraError, SandboxLost, UserError
from agentcompass.core.sandbox import TRUNCATION_MARK, SandboxSpec
from harbor_factory import make_recipe, make_task

TESTS = Path(__file__).resolve().parent
SECRET = "as-" + "s3cr3t" * 4  # a token secret that must never reach a results file

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="the fake Modal SDK runs sandboxes with bubblewrap")


@pytest.fixture(scope="module")
def real_modal():
    return pytest.importorskip("modal", reason="the modal SDK (pip install agentcompass[modal]) defines the signatures")


@pytest.fixture
def fake(monkeypatch, real_modal, tmp_path):
    """The fake SDK as `modal`, no credentials from the environment or ~/.modal.toml."""
    fake_modal.reset()
    for var in ("MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET", "MODAL_PROFILE", "MODAL_SERVER_URL", "MODAL_ENVIRONMENT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("MODAL_CONFIG_PATH", str(tmp_path / "no-modal.toml"))
    # `import modal` runs the shim, which reads the config as the SDK does at import, then answers with the fake.
    monkeypatch.delitem(sys.modules, "modal")
    monkeypatch.syspath_prepend(str(fake_modal.shim_dir(tmp_path / "shim")))
    yield fake_modal
    for sandbox in list(fake_modal.Sandbox.running.values()):
        sandbox.terminate()


def provider(**settings):
    from agentcompass.providers.modal.provider import ModalProvider

    return ModalProvider(**{"token_id": "ak-test", "token_secret": SECRET, **settings})


def spec(name="t1", **kw) -> SandboxSpec:
    kw.setdefault("image", "python:3.11-slim")
    return SandboxSpec(name=name, workdir="/app", labels={"agentcompass": "1", "run": "r", "trial": f"{name}.1"}, **kw)


def calls(name: str) -> list[tuple]:
    return [c for c in fake_modal.calls if c[0] == name]


@pytest.fixture
def sandbox(fake):
    box = provider().open(spec())
    yield box
    box.close()


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


def test_a_command_longer_than_modals_argv_limit_runs_from_a_file(sandbox):
    payload = "x" * 100_000
    result = sandbox.exec(f"echo {payload} | wc -c")
    assert (result.exit_code, result.stdout.strip()) == (0, str(len(payload) + 1))


@pytest.mark.parametrize("slow", [fake_modal.CREATE_DELAY_ENV, fake_modal.SCHEDULE_ENV])
def test_scheduling_is_bounded_by_ready_timeout(fake, monkeypatch, slow):
    """Modal short of capacity: create (or the first command) blocks for 6 s; ready_timeout 2 ends the wait as an
    infra error naming the time waited, and the sandbox made late is terminated, never left running."""
    monkeypatch.setenv(slow, "6")
    started = time.monotonic()
    with pytest.raises(InfraError, match=r"not ready within ready_timeout = 2s \(waited 2\.\d+s"):
        provider(ready_timeout=2).open(spec())
    assert time.monotonic() - started < 4
    assert fake_modal.wait_until(lambda: not fake_modal.Sandbox.running, timeout=10)


def test_waiting_for_scheduling_is_not_command_time(fake, monkeypatch):
    monkeypatch.setenv(fake_modal.SCHEDULE_ENV, "2")
    box = provider().open(spec())
    result = box.exec("echo ran", timeout=1)
    box.close()
    assert (result.exit_code, result.timed_out, result.stdout) == (0, False, "ran\n")


def test_a_broken_output_stream_is_no_result(sandbox, monkeypatch):
    class Broken:
        def __iter__(self):
            yield b"partial"
            raise fake_modal.exception.ConnectionError("stream reset")

    real_exec = sandbox.sandbox.exec

    def exec_with_broken_stdout(*args, **kwargs):
        process = real_exec(*args, **kwargs)
        process.stdout = Broken()
        return process

    monkeypatch.setattr(sandbox.sandbox, "exec", exec_with_broken_stdout)
    with pytest.raises(InfraError, match="broke off"):
        sandbox.exec("echo whole")


def test_a_failed_terminate_is_logged_not_raised(fake):
    box = provider().open(spec())

    def refuse(*, wait=False):
        raise fake_modal.exception.ServiceError("unavailable")

    box.sandbox.terminate = refuse
    box.close()  # the sandbox's hard lifetime ends it; a finished trial is not thrown away
    del box.sandbox.terminate


def test_without_a_lifetime_the_sandbox_still_has_a_hard_cap(fake):
    provider().open(spec()).close()
    [(_, _, create)] = calls("Sandbox.create")
    assert 0 < create["timeout"] <= 24 * 3600


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


# -- a lost sandbox -------------------------------------------------------------------------------
def test_a_sandbox_ended_mid_command_is_sandbox_lost(sandbox, tmp_path):
    threading.Timer(0.5, sandbox.sandbox._end).start()  # Modal ends it: preempted, out of memory, ...
    with pytest.raises(SandboxLost, match="ended"):
        sandbox.exec("sleep 30")
    (tmp_path / "f.txt").write_text("x")
    for call in (lambda: sandbox.exec("true"), lambda: sandbox.upload(tmp_path / "f.txt", "/app/f.txt"),
                 lambda: sandbox.download("/app", tmp_path / "back")):
        with pytest.raises(SandboxLost):
            call()


def test_a_command_killed_in_a_live_sandbox_keeps_its_exit_code(sandbox):
    result = sandbox.exec("kill -9 $$")
    assert result.exit_code == 137 and not result.timed_out  # the command's own fate: the agent's, not infra
    assert sandbox.exec("echo alive").stdout == "alive\n"


# -- exec and files -------------------------------------------------------------------------------
def test_exec_runs_in_the_sandbox(sandbox):
    result = sandbox.exec('echo "$GREETING from $(pwd)"; echo oops >&2; exit 3', env={"GREETING": "hi"}, cwd="/tmp")
    assert (result.exit_code, result.stdout, result.stderr, result.timed_out) == (3, "hi from /tmp\n", "oops\n", False)


def test_exec_timeout_kills_the_command_and_what_it_forked(sandbox):
    started = time.monotonic()
    result = sandbox.exec("(sleep 2; touch /app/late) & echo started; sleep 60", timeout=1)
    assert (result.exit_code, result.timed_out, result.stdout) == (124, True, "started\n")
    assert time.monotonic() - started < 10
    time.sleep(2.5)
    assert sandbox.exec("test -e /app/late").exit_code == 1  # the background child died too


def test_exec_output_is_capped(fake):
    box = provider(output_cap_bytes=1000).open(spec())
    result = box.exec("head -c 100000 /dev/zero | tr '\\0' a")
    box.close()
    assert result.exit_code == 0
    assert result.stdout == "a" * 1000 + TRUNCATION_MARK


def test_upload_and_download_files_and_directories(sandbox, tmp_path):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "a.txt").write_text("alpha\n")
    (src / "run.sh").write_text("echo ran\n")
    (src / "run.sh").chmod(0o755)
    sandbox.upload(src, "/tests")
    sandbox.upload(src / "sub" / "a.txt", "/deep/new/b.txt")
    assert sandbox.exec("/tests/run.sh && cat /tests/sub/a.txt /deep/new/b.txt").stdout == "ran\nalpha\nalpha\n"
    sandbox.exec("mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt")
    sandbox.download("/logs/verifier", tmp_path / "verifier")
    sandbox.download("/deep/new/b.txt", tmp_path / "b.txt")
    assert (tmp_path / "verifier" / "reward.txt").read_text() == "1\n"
    assert (tmp_path / "b.txt").read_text() == "alpha\n"
    with pytest.raises(FileNotFoundError):
        sandbox.download("/logs/agent/missing.json", tmp_path / "missing.json")


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


# -- the CLI, with the fake SDK in the subprocess ---------------------------------------------------
@pytest.fixture
def modal_cli(cli, real_modal, tmp_path):
    """`agentcompass ...` with `import modal` answered by the fake; returns (run, sdk calls)."""
    shim = fake_modal.shim_dir(tmp_path / "shim")
    log = tmp_path / "sdk-calls.jsonl"
    path = os.pathsep.join([str(shim), str(TESTS), os.environ.get("PYTHONPATH", "")])
    base = {"PYTHONPATH": path, fake_modal.LOG_ENV: str(log), "MODAL_CONFIG_PATH": str(tmp_path / "none.toml"),
            "MODAL_TOKEN_ID": "", "MODAL_TOKEN_SECRET": "", "HOME": str(tmp_path)}

    def run(*args: str, env: dict[str, str] | None = None):
        result = cli(*args, env={**base, **(env or {})})
        sdk = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        return result, sdk

    run.env = base
    return run


def private_config(tmp_path: Path) -> Path:
    path = tmp_path / "private.yaml"
    path.write_text("environments:\n  modal:\n    token_id: ak-private\n    token_secret: ${oc.env:MY_MODAL_SECRET}\n")
    return path


def test_demo_end_to_end_on_fake_modal(modal_cli, tmp_path):
    results = tmp_path / "results"
    run, sdk = modal_cli("run", "demo", "oracle", "none", "--env", "modal", "--results-dir", str(results),
                         "--run-name", "m1", "--config", str(private_config(tmp_path)),
                         env={"MY_MODAL_SECRET": SECRET})
    assert run.returncode == 0, run.stderr
    [summary] = results.glob("m1/*/summary.json")
    data = json.loads(summary.read_text())
    assert data["passed"] == 6, data
    creates = [c for c in sdk if c["call"] == "Sandbox.create"]
    terminated = sorted(c["args"][0] for c in sdk if c["call"] == "Sandbox.terminate")
    assert len(creates) == 6
    assert len(terminated) == 6 and len(set(terminated)) == 6
    for create in creates:
        kwargs = create["kwargs"]
        assert kwargs["image"]["dockerfile"].endswith("environment/Dockerfile")
        assert kwargs["block_network"] is True  # the demo tasks disallow internet
        assert kwargs["tags"]["agentcompass"] == "1" and kwargs["tags"]["run"] == "m1"
        # No sandbox outlives its task: agent 300 s + verifier 60 s (every demo task.toml) + the margin.
        assert kwargs["workdir"] == "/app" and kwargs["timeout"] == 300 + 60 + LIFETIME_MARGIN_S
    assert {tuple(c["args"]) for c in sdk if c["call"] == "Client.from_credentials"} == {("ak-private", SECRET)}
    # The Dockerfiles build FROM the recipe's base (a public one by default; the tests' offline one here).
    builds = [c["kwargs"]["build_args"] for c in sdk if c["call"] == "Image.from_dockerfile"]
    assert builds == [{"BASE_IMAGE": "agentcompass/base:bookworm"}] * 6
    for path in results.rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), path


def test_config_show_redacts_the_tokens(modal_cli, tmp_path):
    show, _ = modal_cli("config", "show", "demo", "oracle", "none", "--env", "modal",
                        "--config", str(private_config(tmp_path)), env={"MY_MODAL_SECRET": SECRET})
    assert show.returncode == 0, show.stderr
    assert SECRET not in show.stdout and "ak-private" not in show.stdout
    assert "***" in show.stdout


def test_docs_names_and_aliases_through_the_cli(modal_cli, tmp_path):
    creds = {"MODAL_TOKEN_ID": "ak-x", "MODAL_TOKEN_SECRET": "as-x"}
    run, sdk = modal_cli("run", "demo", "oracle", "none", "--env", "modal", "--results-dir", str(tmp_path / "out"),
                         "--benchmark-params", '{"limit": 1}', "--env-params", '{"cpu": 4, "timeout": 3600}',
                         "environments.modal.memory_mb=2048", env=creds)
    assert run.returncode == 0, run.stderr
    [create] = [c["kwargs"] for c in sdk if c["call"] == "Sandbox.create"]
    assert (create["cpu"], create["memory"], create["timeout"]) == ([4.0, 4.0], [2048, 2048], 3600)
    show, _ = modal_cli("config", "show", "demo", "oracle", "none", "--env", "modal",
                        "--env-params", '{"cpus": 2, "idle_timeout_s": 60}', env=creds)
    assert show.returncode == 0, show.stderr
    env = show.stdout.split("\nenv:\n", 1)[1]
    assert "  cpu: 2" in env and "  idle_timeout: 60" in env  # the canonical spelling, whatever was typed
    assert "cpus" not in env and "idle_timeout_s" not in env


def test_an_error_no_retry_can_fix_stops_the_run_with_one_line(modal_cli, tmp_path):
    results = tmp_path / "out"
    run, sdk = modal_cli("run", "demo", "oracle", "none", "--env", "modal", "--results-dir", str(results),
                         "--run-name", "bad", "--task-concurrency", "1",
                         env={"MODAL_TOKEN_ID": "ak-x", "MODAL_TOKEN_SECRET": "as-x",
                              fake_modal.FAIL_ENV: "PermissionDeniedError"})
    assert run.returncode == 2, run.stderr
    assert "PermissionDeniedError" in run.stderr and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert count(sdk, "Sandbox.create") == 1  # not retried, and no other task tried
    trials = list(results.glob("bad/*/trials.jsonl"))
    assert not any(t.read_text().strip() for t in trials)  # nothing recorded: a rerun after the fix runs them
    [run_json] = results.glob("bad/*/run.json")
    assert json.loads(run_json.read_text())["status"] == "stopped"


def test_in_a_pooled_sweep_such_an_error_stops_its_job_alone(modal_cli, tmp_path):
    """--env local,modal pooled: modal's job stops at its first trial, local's runs to the end."""
    results = tmp_path / "out"
    run, sdk = modal_cli("run", "demo", "oracle", "none", "--env", "local,modal", "-m", "--sweep-parallel",
                         "--benchmark-params", '{"limit": 3}', "--results-dir", str(results), "--run-name", "pool",
                         "--task-concurrency", "1",
                         env={"MODAL_TOKEN_ID": "ak-x", "MODAL_TOKEN_SECRET": "as-x",
                              fake_modal.FAIL_ENV: "PermissionDeniedError"})
    assert run.returncode == 2, run.stderr
    errors = [line for line in run.stderr.splitlines() if not line.startswith("[")]  # beside local's progress lines
    assert len(errors) == 1 and errors[0].startswith("error: ") and "PermissionDeniedError" in errors[0], run.stderr
    assert count(sdk, "Sandbox.create") == 1  # modal's first trial, not retried; none of its other tasks tried
    local, modal = results / "pool" / "demo__oracle__none__local", results / "pool" / "demo__oracle__none__modal"
    assert json.loads((modal / "run.json").read_text())["status"] == "stopped"
    assert not (modal / "trials.jsonl").exists() or not (modal / "trials.jsonl").read_text().strip()
    assert json.loads((local / "run.json").read_text())["status"] == "completed"
    assert json.loads((local / "summary.json").read_text())["passed"] == 3


def test_a_transient_error_is_retried(modal_cli, tmp_path):
    results = tmp_path / "out"
    run, sdk = modal_cli("run", "demo", "oracle", "none", "--env", "modal", "--results-dir", str(results),
                         "--benchmark-params", '{"limit": 1}', "run.retry_backoff_s=0.1",
                         env={"MODAL_TOKEN_ID": "ak-x", "MODAL_TOKEN_SECRET": "as-x",
                              fake_modal.FAIL_ENV: "ServiceError:1"})
    assert run.returncode == 0, run.stderr
    [trial] = [json.loads(line) for line in next(results.glob("*/*/trials.jsonl")).read_text().splitlines()]
    assert (trial["status"], trial["retries"]) == ("passed", 1)


def test_resource_exhausted_is_back_pressure_not_a_retry(modal_cli, tmp_path):
    """Modal's rate or concurrency limit: the trial waits (with backoff, fewer sandboxes at once) and is not retried."""
    results = tmp_path / "out"
    run, sdk = modal_cli("run", "demo", "oracle", "none", "--env", "modal", "--results-dir", str(results),
                         "--benchmark-params", '{"limit": 1}',
                         env={"MODAL_TOKEN_ID": "ak-x", "MODAL_TOKEN_SECRET": "as-x",
                              fake_modal.FAIL_ENV: "ResourceExhaustedError:1"})
    assert run.returncode == 0, run.stderr
    [trial] = [json.loads(line) for line in next(results.glob("*/*/trials.jsonl")).read_text().splitlines()]
    assert (trial["status"], trial["retries"]) == ("passed", 0) and trial["timings"]["wait"] >= 2
    assert "back-pressure: at most 1 sandbox(es) open at once" in run.stderr


def test_the_grading_request_of_swebench_is_cpu_4_as_modal_eval_asks(fake):
    """swebench's run_evaluation_modal.py creates its sandbox with cpu=4 (a request, no limit): the fresh
    grading spec's cpu_request of 8 vCPUs is those 4 Modal cores."""
    from agentcompass.formats.swebench.format import OFFICIAL_MODAL_GRADING_VCPUS

    provider().open(spec("grade", cpu_request=OFFICIAL_MODAL_GRADING_VCPUS)).close()
    [(_, _, create)] = calls("Sandbox.create")
    assert create["cpu"] == 4 and not isinstance(create["cpu"], tuple)


def test_env_open_qps_paces_sandbox_creation(modal_cli, tmp_path):
    from test_pacing import assert_rate

    run, sdk = modal_cli("run", "demo", "oracle", "none", "--env", "modal", "--results-dir", str(tmp_path / "out"),
                         "--k", "4", "--task-concurrency", "8", "--env-open-qps", "2",
                         env={"MODAL_TOKEN_ID": "ak-x", "MODAL_TOKEN_SECRET": "as-x"})
    assert run.returncode == 0, run.stderr
    created = sorted(c["t"] for c in sdk if c["call"] == "Sandbox.create")
    assert len(created) == 24
    assert_rate(created, 2, 2)
    trials = [json.loads(line) for line in next((tmp_path / "out").glob("*/*/trials.jsonl")).read_text().splitlines()]
    waited = [t for t in trials if t["timings"].get("wait", 0) > 1]
    assert waited and all(t["timings"]["total"] < t["timings"]["wait"] + 30 for t in waited)
    assert all(t["timings"]["total"] < 30 for t in trials)  # the wait is not the trial's time


def test_provider_limit_caps_open_sandboxes(modal_cli, tmp_path):
    run, sdk = modal_cli("run", "demo", "oracle", "none", "--env", "modal", "--results-dir", str(tmp_path / "out"),
                         "--k", "3", "--task-concurrency", "8", "--provider-limit", "3", "run.env_open_qps=100",
                         env={"MODAL_TOKEN_ID": "ak-x", "MODAL_TOKEN_SECRET": "as-x"})
    assert run.returncode == 0, run.stderr
    open_now = most = 0
    for call in sdk:  # in the order the fake recorded them
        open_now += {"Sandbox.create": 1, "Sandbox.terminate": -1}.get(call["call"], 0)
        most = max(most, open_now)
    assert most == 3 and count(sdk, "Sandbox.create") == 18


def test_missing_credentials_exit_2_with_one_line(modal_cli, tmp_path):
    run, sdk = modal_cli("run", "demo", "oracle", "none", "--env", "modal", "--results-dir", str(tmp_path / "out"))
    assert run.returncode == 2
    assert len(run.stderr.strip().splitlines()) == 1
    assert "MODAL_TOKEN_ID" in run.stderr
    assert not (tmp_path / "out").exists()
    assert sdk == []


@pytest.fixture
def slow_bench(tmp_path) -> Path:
    dataset, config_dir = tmp_path / "data", tmp_path / "conf"
    for i in range(3):
        make_task(dataset, f"slow-{i}", solve="sleep 60", test="echo 1 > /logs/verifier/reward.txt",
                  dockerfile="FROM scratch\nWORKDIR /app\n", agent_timeout=30)
    make_task(dataset, "quick", solve="sleep 60", test="echo 1 > /logs/verifier/reward.txt",
              dockerfile="FROM scratch\nWORKDIR /app\n", agent_timeout=1)
    make_recipe(config_dir, "slowbench", dataset, runs_on_host=False)
    return config_dir


def test_a_sandbox_lost_in_the_agent_or_the_verifier_phase_is_retried(modal_cli, tmp_path):
    dataset, config_dir = tmp_path / "data", tmp_path / "conf"
    make_task(dataset, "t1", solve="sleep 2; echo ok > /app/answer.txt",
              test="sleep 2; grep -q ok /app/answer.txt && echo 1 > /logs/verifier/reward.txt",
              dockerfile="FROM scratch\nWORKDIR /app\n")
    make_recipe(config_dir, "lossbench", dataset, runs_on_host=False)
    results = tmp_path / "out"
    run, sdk = modal_cli("run", "lossbench", "oracle", "none", "--env", "modal", "--config-dir", str(config_dir),
                         "--results-dir", str(results), "--run-name", "loss", "run.retry_backoff_s=0.1",
                         env={"MODAL_TOKEN_ID": "ak-x", "MODAL_TOKEN_SECRET": "as-x",
                              fake_modal.LOSE_ENV: "solve.sh,tests/test.sh"})
    assert run.returncode == 0, run.stderr
    (trial,) = [json.loads(line) for line in next(results.glob("loss/*/trials.jsonl")).read_text().splitlines()]
    # Lost under solve.sh (agent), then under test.sh (verifier): two retries, then a pass.
    assert (trial["status"], trial["retries"]) == ("passed", 2), trial
    # Three sandboxes, each terminated (a create that found the name still held by the ending one retried).
    assert len({c["args"][0] for c in sdk if c["call"] == "Sandbox.exec"}) == 3 and count(sdk, "Sandbox.terminate") == 3


def count(sdk: list[dict], name: str) -> int:
    return sum(1 for c in sdk if c["call"] == name)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupt_terminates_every_sandbox(modal_cli, slow_bench, tmp_path, sig):
    log = Path(modal_cli.env[fake_modal.LOG_ENV])
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentcompass", "run", "slowbench", "oracle", "none", "--env", "modal",
         "--config-dir", str(slow_bench), "--results-dir", str(tmp_path / "out"), "--run-name", f"int-{uuid.uuid4().hex[:6]}",
         "--task-concurrency", "4", "--env-params", '{"token_id": "ak-x", "token_secret": "as-x"}'],
        env={**os.environ, **modal_cli.env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Wait until the agent timed out in `quick` (a trial error) and the slow ones are running.
    assert fake_modal.wait_until(lambda: log.exists() and log.read_text().count('"Sandbox.create"') == 4
                                 and log.read_text().count('"Sandbox.terminate"') >= 1, timeout=20), proc.poll()
    time.sleep(0.5)  # the slow trials are inside their agents
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    sdk = [json.loads(line) for line in log.read_text().splitlines()]
    terminated = [c["args"][0] for c in sdk if c["call"] == "Sandbox.terminate"]
    assert count(sdk, "Sandbox.create") == 4
    assert len(terminated) == 4 and len(set(terminated)) == 4


def test_cleanup_terminates_tagged_sandboxes(fake):
    from agentcompass.providers.modal.provider import ModalProvider

    p = provider()
    p.open(spec("a"))
    p.open(SandboxSpec(name="b", image="x", labels={"agentcompass": "1", "run": "other"}))
    assert ModalProvider(token_id="ak-test", token_secret=SECRET).cleanup("r") == 1
    assert [s.name for s in fake_modal.Sandbox.running.values()] == ["b"]
    assert calls("Sandbox.list")[-1][2]["tags"] == {"agentcompass": "1", "run": "r"}


def test_cleanup_command_lists_by_run_tag(modal_cli):
    run, sdk = modal_cli("cleanup", "--env", "modal", "--run-name", "gone", env={"MODAL_TOKEN_ID": "ak-x", "MODAL_TOKEN_SECRET": "as-x"})
    assert run.returncode == 0, run.stderr
    assert "removed 0 modal sandbox(es) of run 'gone'" in run.stdout
    [listed] = [c for c in sdk if c["call"] == "Sandbox.list"]
    assert listed["kwargs"]["tags"] == {"agentcompass": "1", "run": "gone"}


def test_cleanup_takes_credentials_from_a_private_config(modal_cli, tmp_path):
    run, sdk = modal_cli("cleanup", "--env", "modal", "--config", str(private_config(tmp_path)),
                         env={"MY_MODAL_SECRET": SECRET})
    assert run.returncode == 0, run.stderr
    assert {tuple(c["args"]) for c in sdk if c["call"] == "Client.from_credentials"} == {("ak-private", SECRET)}
    assert SECRET not in run.stdout + run.stderr


# -- env check modal --------------------------------------------------------------------------------
def env_check(modal_cli, tmp_path, *extra: str, env: dict[str, str] | None = None):
    run, sdk = modal_cli("env", "check", "modal", *extra, env=env)
    return run, [tuple(c["args"]) for c in sdk if c["call"] == "Client.from_credentials"], sdk


def modal_toml(tmp_path: Path, text: str) -> dict[str, str]:
    path = tmp_path / "profiles.toml"
    path.write_text(text)
    return {"MODAL_CONFIG_PATH": str(path)}


PROFILE = '[work]\nactive = true\ntoken_id = "ak-file"\ntoken_secret = "' + SECRET + '"\nenvironment = "dev"\n'


@pytest.mark.parametrize("source", ["config", "environment", "profile"])
def test_env_check_names_each_credential_source_alone(modal_cli, tmp_path, source):
    extra = ("--config", str(private_config(tmp_path))) if source == "config" else ()
    env = {"config": {"MY_MODAL_SECRET": SECRET},
           "environment": {"MODAL_TOKEN_ID": "ak-env", "MODAL_TOKEN_SECRET": SECRET},
           "profile": modal_toml(tmp_path, PROFILE)}[source]
    run, used, sdk = env_check(modal_cli, tmp_path, *extra, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    expected = {"config": ("--config " + str(tmp_path / "private.yaml"), "ak-private"),
                "environment": ("MODAL_TOKEN_ID and MODAL_TOKEN_SECRET", "ak-env"),
                "profile": ("profile 'work' of " + str(tmp_path / "profiles.toml"), "ak-file")}[source]
    assert run.stdout.startswith("env modal: ready") and expected[0] in run.stdout
    assert used == [(expected[1], SECRET)] and any(c["call"] == "Client.hello" for c in sdk)
    assert SECRET not in run.stdout + run.stderr
    if source == "profile":
        assert f"environment: dev (from profile 'work' of {tmp_path / 'profiles.toml'})" in run.stdout
    assert "workspace: fake-workspace" in run.stdout and "server: " in run.stdout


TWO_PROFILES = ('[work]\ntoken_id = "ak-work"\ntoken_secret = "as-work"\nserver_url = "https://work.invalid"\n'
                'environment = "dev"\n[home]\ntoken_id = "ak-home"\ntoken_secret = "as-home"\n')


@pytest.mark.parametrize("source", ["config", "environment"])
def test_explicit_tokens_work_with_any_modal_toml_and_ignore_its_profile(modal_cli, tmp_path, source):
    """Two profiles, none active: the SDK's _check_config refuses the file ("No Modal profile is active") even
    for Client.from_credentials; explicit tokens are no profile's, so neither that nor its server_url applies."""
    extra = ("--config", str(private_config(tmp_path))) if source == "config" else ()
    env = {**modal_toml(tmp_path, TWO_PROFILES), "MY_MODAL_SECRET": SECRET,
           **({"MODAL_TOKEN_ID": "ak-env", "MODAL_TOKEN_SECRET": SECRET} if source == "environment" else {})}
    run, used, sdk = env_check(modal_cli, tmp_path, *extra, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "server: Modal default (from the SDK's default (the profile's settings go with its own tokens only))" in run.stdout
    assert "environment: the workspace default" in run.stdout
    [lookup_client] = [c for c in sdk if c["call"] == "Client.hello"]
    assert lookup_client["args"][0].endswith("@default")  # the client did not take the profile's server_url
    results = tmp_path / "results"
    run, sdk = modal_cli("run", "demo", "oracle", "none", "--env", "modal", "--results-dir", str(results), *extra, env=env)
    assert run.returncode == 0, run.stderr
    assert all(c["kwargs"]["app"].endswith("@default") for c in sdk if c["call"] == "Sandbox.create")


def test_the_sdks_own_refusal_of_modal_toml_is_one_line(modal_cli, tmp_path):
    """Profile tokens from a file with two active profiles: the SDK refuses it; we say so in one line."""
    text = TWO_PROFILES.replace("[work]\n", "[work]\nactive = true\n").replace("[home]\n", "[home]\nactive = true\n")
    run, _ = modal_cli("run", "demo", "oracle", "none", "--env", "modal", "--results-dir", str(tmp_path / "r"),
                       env=modal_toml(tmp_path, text))
    assert run.returncode == 2 and "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert "modal profile activate" in run.stderr


def test_a_malformed_modal_toml_does_not_stop_config_tokens(modal_cli, tmp_path):
    run, _ = modal_cli("run", "demo", "oracle", "none", "--env", "modal", "--results-dir", str(tmp_path / "r"),
                       "--config", str(private_config(tmp_path)),
                       env={**modal_toml(tmp_path, "[work\ntoken_id = 1"), "MY_MODAL_SECRET": SECRET})
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr


def test_the_fake_reads_modal_toml_as_the_sdk_does(fake, tmp_path, monkeypatch):
    """What the SDK refuses at import (a malformed file) and at from_credentials (_check_config), the fake refuses."""
    monkeypatch.setenv("MODAL_CONFIG_PATH", str(modal_toml(tmp_path, "[work\n")["MODAL_CONFIG_PATH"]))
    with pytest.raises(fake.exception.InvalidError, match="Error when reading the modal configuration"):
        fake.imported()
    monkeypatch.setenv("MODAL_CONFIG_PATH", str(modal_toml(tmp_path, TWO_PROFILES)["MODAL_CONFIG_PATH"]))
    fake.imported()
    with pytest.raises(fake.exception.InvalidError, match="No Modal profile is active"):
        fake.Client.from_credentials("ak-x", "as-x")


def test_env_check_with_every_source_uses_the_config_file(modal_cli, tmp_path):
    env = {"MY_MODAL_SECRET": SECRET, "MODAL_TOKEN_ID": "ak-env", "MODAL_TOKEN_SECRET": "as-env",
           **modal_toml(tmp_path, PROFILE)}
    run, used, _ = env_check(modal_cli, tmp_path, "--config", str(private_config(tmp_path)), env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert used == [("ak-private", SECRET)] and "--config" in run.stdout and SECRET not in run.stdout + run.stderr


def test_env_check_without_credentials_exits_1_with_the_setup_steps(modal_cli, tmp_path):
    run, used, _ = env_check(modal_cli, tmp_path)
    assert run.returncode == 1 and used == []
    assert "not ready" in run.stdout
    for step in ("modal setup", "modal token set", "MODAL_TOKEN_ID", "--config FILE"):
        assert step in run.stdout


def test_env_check_with_rejected_credentials_exits_1(modal_cli, tmp_path):
    run, _, _ = env_check(modal_cli, tmp_path, env={"MODAL_TOKEN_ID": fake_modal.REJECTED_TOKEN,
                                                    "MODAL_TOKEN_SECRET": SECRET})
    assert run.returncode == 1 and "rejected" in run.stdout and SECRET not in run.stdout + run.stderr


@pytest.mark.parametrize("text, expected", [
    ("[a]\ntoken_id = 'x'\n[b\n", "is not valid TOML"),
    ("[a]\nactive = true\n[b]\nactive = true\n", "several Modal profiles active"),
    ("[a]\ntoken_id = 'x'\ntoken_secret = 'y'\n[b]\ntoken_id = 'x'\ntoken_secret = 'y'\n", "none is active"),
])
def test_a_modal_toml_the_sdk_would_refuse_is_one_line(modal_cli, tmp_path, text, expected):
    run, used, _ = env_check(modal_cli, tmp_path, env=modal_toml(tmp_path, text))
    assert run.returncode == 1 and expected in run.stdout and used == [] and "Traceback" not in run.stderr
    again, _ = modal_cli("run", "demo", "oracle", "none", "--env", "modal", "--results-dir", str(tmp_path / "o"),
                         env=modal_toml(tmp_path, text))
    assert again.returncode == 2 and expected in again.stderr and len(again.stderr.strip().splitlines()) == 1


def test_list_envs_shows_readiness_without_the_network(modal_cli, tmp_path):
    run, sdk = modal_cli("list", "envs", env={"MODAL_TOKEN_ID": "ak-x", "MODAL_TOKEN_SECRET": "as-x"})
    assert run.returncode == 0, run.stderr
    assert [line for line in run.stdout.splitlines() if line.strip().startswith("modal")][0].endswith("[ready]")
    assert sdk == []  # no client was made
    bare, _ = modal_cli("list", "envs")
    assert "not ready: credentials: none found; see `agentcompass env check modal`" in bare.stdout


# -- live Modal (opt in) ----------------------------------------------------------------------------
@pytest.fixture
def live(request, real_modal):
    from agentcompass.providers.modal.provider import modal_credentials

    if not request.config.getoption("--run-modal"):
        pytest.skip("live Modal test: opt in with --run-modal")
    if modal_credentials(None, None) is None:
        pytest.skip("live Modal test: no credentials (MODAL_TOKEN_ID/MODAL_TOKEN_SECRET or ~/.modal.toml)")


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


def test_sandbox_lifetime_defaults_to_the_tasks_timeouts_plus_a_margin():

    task = Task(id="t", instruction="", agent_timeout_s=900, verify_timeout_s=300, build_timeout_s=None)
    assert task.sandbox_spec("n", {}, None).lifetime_s == 900 + 300 + LIFETIME_MARGIN_S
    assert Task(id="u", instruction="").sandbox_spec("n", {}, None).lifetime_s is None
    # A harness limit longer than the task's agent timeout (mini_swe_agent's wall_time_limit_s) extends it.
    assert task.sandbox_spec("n", {}, None, 3600).lifetime_s == 3600 + 300 + LIFETIME_MARGIN_S
    assert task.sandbox_spec("n", {}, None, 60).lifetime_s == 900 + 300 + LIFETIME_MARGIN_S


def test_the_trial_gives_the_sandbox_the_harness_time_limit(tmp_path):
    from agentcompass.harnesses.mini_swe_agent import MiniSweAgentHarness
    from agentcompass.core.trial import OpenSandboxes, TrialRunner

    class Refuse:
        specs: list = []

        def open(self, spec):
            self.specs.append(spec)
            raise InfraError("stop here")

    harness = MiniSweAgentHarness(wall_time_limit_s=5000)
    provider = Refuse()
    runner = TrialRunner(None, harness, provider, None, "r", {}, OpenSandboxes())
    with pytest.raises(InfraError):
        runner.run(Task(id="t", instruction="", agent_timeout_s=600, verify_timeout_s=60), 1, tmp_path)
    assert provider.specs[0].lifetime_s == 5000 + 60 + LIFETIME_MARGIN_S


@pytest.mark.modal
def test_live_env_check_then_validate_demo(live, cli, tmp_path):
    """A new user's first two steps on real Modal: the credentials work, then the demo validates."""
    check = cli("env", "check", "modal")
    assert check.returncode == 0 and "Modal accepted the credentials" in check.stdout, check.stdout + check.stderr
    env = {"AGENTCOMPASS_BASE_IMAGE": "python:3.11-slim-bookworm"}  # the public base, as a user has it
    run = cli("validate", "demo", "--env", "modal", "--results-dir", str(tmp_path), env=env, timeout=1800)
    assert run.returncode == 0, run.stdout + run.stderr
