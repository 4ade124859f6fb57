"""`agentcompass endpoint up|status|down PRESET --env modal` through the modal SDK's real client against a fake of
Modal's API server (tests/fake_modal_endpoints.py: real gRPC, the SDK's protobuf requests), and a run that names the
endpoint (`--model-base-url modal:NAME`) going end to end to a scripted model endpoint behind it."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

import fake_modal_endpoints as fake_modal
from conftest import run_cli
from fake_llm_server import FakeLLM, FakeLLMServer
from mini_demo import FIX_COMMANDS, ONLY_TASK, files_containing, isolated_env, read_trials, run_dir
from modal_sdk import live, real_modal  # noqa: F401  (the opt-in live fixtures: --run-modal and credentials)

PROXY_KEY, PROXY_SECRET = "wk-proxy-7f3a", "ws-proxy-secret-91c2"


@pytest.fixture
def modal_api():
    fake = fake_modal.FakeModal(volumes={"glm-5-2-weights": "vo-000042"}, provision_polls=2)
    url, stop = fake_modal.serve(fake)
    yield fake, url
    stop()


def endpoint(url: str, *args: str, token_secret: str = fake_modal.TOKEN_SECRET, tmp: Path | None = None):
    env = {"MODAL_SERVER_URL": url, "MODAL_TOKEN_ID": fake_modal.TOKEN_ID, "MODAL_TOKEN_SECRET": token_secret}
    if tmp is not None:
        env["HOME"] = str(tmp)  # no ~/.modal.toml of this machine's
    return run_cli("endpoint", *args, "--poll-s", "0.05", env=env, timeout=120)


def test_up_creates_once_reusing_the_volume_waits_and_prints_the_url_then_down_stops_it(modal_api, tmp_path):
    fake, url = modal_api
    first = endpoint(url, "up", "glm-5.2", "--env", "modal", tmp=tmp_path)
    assert first.returncode == 0, first.stderr
    [created] = fake.created("EndpointCreate")
    assert created.name == "glm-5-2" and created.serving_mode == fake_modal.api_pb2.ENDPOINT_SERVING_MODE_DEDICATED
    assert created.model.custom.base_model_repo_id == "zai-org/GLM-5.2-FP8"
    assert (created.model.custom.modal_volume.volume_id, created.model.custom.modal_volume.model_path) == \
        ("vo-000042", "zai-org/GLM-5.2-FP8")  # the weights volume reused, never downloaded again
    assert not created.unauthenticated  # proxy-token auth by default
    assert "provisioning" in first.stderr and "live" in first.stderr  # progress while it waits
    assert "glm-5-2 (ep-000001) is live at https://fake-endpoint.modal.run/v1" in first.stdout
    assert "$50.70/h" in first.stdout and "--model-base-url modal:glm-5-2" in first.stdout

    again = endpoint(url, "up", "glm-5.2", tmp=tmp_path)
    assert again.returncode == 0, again.stderr
    assert len(fake.created("EndpointCreate")) == 1 and "reusing it" in again.stdout  # a second up creates nothing

    status = endpoint(url, "status", "glm-5.2", tmp=tmp_path)
    assert status.returncode == 0 and "is live" in status.stdout and "$50.70/h while it serves" in status.stdout

    down = endpoint(url, "down", "glm-5.2", tmp=tmp_path)
    assert down.returncode == 0 and "stopped glm-5-2 (ep-000001)" in down.stdout
    assert [r.endpoint_id for r in fake.created("EndpointStop")] == ["ep-000001"]
    gone = endpoint(url, "status", "glm-5.2", tmp=tmp_path)
    assert gone.returncode == 1 and "is not up" in gone.stdout
    assert endpoint(url, "down", "glm-5.2", tmp=tmp_path).returncode == 0  # idempotent
    assert len(fake.created("EndpointStop")) == 1


def test_up_gives_up_waiting_after_its_bound_and_says_how_to_follow(modal_api, tmp_path):
    fake, url = modal_api
    fake.provision_polls = 10_000
    proc = endpoint(url, "up", "glm-5.2", "--wait-s", "0.5", tmp=tmp_path)
    assert proc.returncode == 1
    assert "still provisioning after 0 s" in proc.stderr or "still provisioning after 1 s" in proc.stderr
    assert "endpoint status glm-5.2" in proc.stderr and "Traceback" not in proc.stderr


def test_a_failed_endpoint_is_one_line_and_the_next_up_replaces_it(modal_api, tmp_path):
    fake, url = modal_api
    fake.fail = True
    proc = endpoint(url, "up", "glm-5.2", tmp=tmp_path)
    assert proc.returncode == 1 and proc.stderr.splitlines()[-1].startswith("endpoint glm-5-2 is failed"), proc.stderr
    fake.fail = False
    proc = endpoint(url, "up", "glm-5.2", tmp=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert [r.endpoint_id for r in fake.created("EndpointStop")] == ["ep-000001"]
    assert len(fake.created("EndpointCreate")) == 2 and "(ep-000002) is live" in proc.stdout


@pytest.mark.parametrize(("args", "secret", "said"), [
    (("up", "glm-5.2"), "as-wrong", "Modal rejected the credentials"),
    (("up", "kimi-k3", "--config", "MISSING_VOLUME"), fake_modal.TOKEN_SECRET, "the Modal volume 'k3-weights' does not exist"),
    (("up", "gpt-5"), fake_modal.TOKEN_SECRET, "preset 'gpt-5' says nothing of serving it"),
    (("up", "glm-5.2", "--env", "docker"), fake_modal.TOKEN_SECRET, "--env docker cannot serve an endpoint"),
])
def test_bad_input_is_one_line_exit_2_and_creates_nothing(modal_api, tmp_path, args, secret, said):
    fake, url = modal_api
    overlay = tmp_path / "private.yaml"
    overlay.write_text("model: {endpoint: {modal: {volume: k3-weights, volume_path: /weights}}}\n")
    args = tuple(str(overlay) if a == "MISSING_VOLUME" else a for a in args)
    proc = endpoint(url, *args, token_secret=secret, tmp=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert said in proc.stderr and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert fake.created("EndpointCreate") == []
    assert "as-wrong" not in proc.stderr + proc.stdout


def test_a_run_naming_the_endpoint_reaches_it_with_the_proxy_token_and_bills_its_app(modal_api, tmp_path):
    """`--model-base-url modal:NAME`: the run looks the endpoint up, sends the private config's proxy token with
    every call, records the endpoint's app for `report --bill modal`, and writes neither token anywhere."""
    fake, url = modal_api
    assert endpoint(url, "up", "glm-5.2", tmp=tmp_path).returncode == 0
    llm = FakeLLM(FIX_COMMANDS)
    private = tmp_path / "private.yaml"
    private.write_text(textwrap.dedent(f"""
        model:
          params:
            extra_headers: {{Modal-Key: {PROXY_KEY}, Modal-Secret: {PROXY_SECRET}}}
    """))
    with FakeLLMServer(llm) as server:
        fake.service_url = server.base_url.removesuffix("/v1")
        env = {**isolated_env(tmp_path), "MODAL_SERVER_URL": url, "MODAL_TOKEN_ID": fake_modal.TOKEN_ID,
               "MODAL_TOKEN_SECRET": fake_modal.TOKEN_SECRET}
        proc = run_cli("run", "demo", "mini_swe_agent", "glm-5.2", "--model-base-url", "modal:glm-5-2",
                       "--config", str(private), "--env", "local", "--benchmark-params", ONLY_TASK,
                       "--results-dir", str(tmp_path / "results"), "--run-name", "named", cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    directory = run_dir(tmp_path / "results")
    [trial] = read_trials(directory)
    assert trial["status"] == "passed", trial
    calls = [h for h in llm.headers_seen]
    assert calls and all((h.get("modal-key"), h.get("modal-secret")) == (PROXY_KEY, PROXY_SECRET) for h in calls)
    recorded = json.loads((directory / "run.json").read_text())
    model = recorded.get("config", recorded).get("model") or recorded["model"]
    assert model["base_url"] == f"{server.base_url}" and model["pricing"]["modal_app"] == "ap-000001"
    for secret in (PROXY_KEY, PROXY_SECRET, fake_modal.TOKEN_SECRET):
        assert files_containing(tmp_path / "results", secret) == [] and secret not in proc.stdout + proc.stderr


def test_the_gateway_sends_the_presets_extra_headers_upstream_over_whatever_the_agent_sent():
    """Installed CLIs reach a proxy-token endpoint through the gateway: the token goes upstream on every call, and a
    header of the same name from the agent never replaces it."""
    from agentcompass.core.schema import ModelConfig
    from agentcompass.gateway.server import upstream_of

    model = ModelConfig(name="openai/zai-org/GLM-5.2-FP8", api="openai", base_url="https://ep.modal.run/v1",
                        params={"extra_headers": {"Modal-Key": PROXY_KEY, "Modal-Secret": PROXY_SECRET}})
    upstream = upstream_of(model)
    sent = upstream.headers({"modal-key": "wk-agents-own", "openai-beta": "x"})
    assert (sent["modal-key"], sent["modal-secret"]) == (PROXY_KEY, PROXY_SECRET)
    assert PROXY_SECRET not in repr(upstream)


def test_live_a_small_endpoint_comes_up_is_reused_and_goes_down(live, tmp_path):  # noqa: F811
    """Opt in: `pytest --run-modal` with Modal credentials. Brings a small model up on the real Modal (billed while
    it provisions and serves: minutes of one GPU), checks a second `up` reuses it, then stops it whatever happened."""
    models = tmp_path / "conf" / "models"
    models.mkdir(parents=True)
    (models / "live-small.yaml").write_text(textwrap.dedent("""
        name: openai/Qwen/Qwen3-0.6B
        api: openai
        pricing: {billing: self_hosted, hourly_usd: 1.0}
        endpoint: {modal: {name: agentcompass-live-test, model: Qwen/Qwen3-0.6B, scaledown_window_s: 60}}
    """))
    args = ("live-small", "--env", "modal", "--config-dir", str(tmp_path / "conf"))
    try:
        up = run_cli("endpoint", "up", *args, "--wait-s", "1200", timeout=1500)
        assert up.returncode == 0, up.stderr
        assert "is live at https://" in up.stdout
        again = run_cli("endpoint", "up", *args, timeout=300)
        assert again.returncode == 0 and "reusing it" in again.stdout
    finally:
        down = run_cli("endpoint", "down", *args, timeout=300)
    assert down.returncode == 0, down.stderr
    assert run_cli("endpoint", "status", *args, timeout=300).returncode == 1

