"""kimi_cli: its config, command and what it prints read back (the outputs below were recorded from the pinned
kimi-cli 1.51.0 against tests/fake_llm_server.py's scripted replies), kimi-cli's own loader reading the config, and
one run on docker's default bridge against the scripted model server through the run's gateway."""

from __future__ import annotations

import subprocess
import tarfile
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest

from fake_llm_server import FakeLLM
from test_installed_agents import API_KEY, FIX_COMMANDS, TASK, assert_solved
from test_js_clis import harness_of, preset, settings
from test_py_clis import bundles, run_cli_agent  # noqa: F401 (bundles: the shared bundle cache, a fixture)

from agentcompass.core.errors import (AgentAuthenticationError, AgentTimeoutError, ApiInternalServerError,
                                      ApiRateLimitError, BadRequestError, ContextWindowExceededError, ModelNotFoundError,
                                      NonZeroAgentExitCodeError, UserError)

ENDPOINT = SimpleNamespace(openai_base_url="http://172.17.0.1:4242/t/abc/v1", api_key="sk-gateway-token-1f2e")
RUN = ('{"role":"assistant","content":"Step 0: running a command.","tool_calls":[{"type":"function","id":"call_0",'
       '"function":{"name":"Shell","arguments":"{\\"command\\": \\"echo hi > out.txt\\"}"}}]}\n'
       '{"role":"tool","content":"<system>Command executed successfully.</system>","tool_call_id":"call_0"}\n'
       '{"role":"assistant","content":"Done."}\n')
RESUME = "\nTo resume this session: kimi -r 480415e0-11cc-43fe-8f02-91a1be205d04\n"


def printed(status: int, message: str, kind: str = "server_error") -> str:
    return f"Error code: {status} - {{'error': {{'message': '{message}', 'type': '{kind}'}}}}\n"


CONTEXT = ("Error code: 400 - {'error': {'message': \"This model's maximum context length is 8192 tokens. However, your "
           "messages resulted in 9001 tokens. Please reduce the length of the messages.\", 'type': "
           "'invalid_request_error', 'param': 'messages', 'code': 'context_length_exceeded'}}\n")


def test_the_config_names_the_gateway_as_an_openai_legacy_provider_and_the_key_stays_in_the_env():
    harness = harness_of("kimi_cli")
    model = preset("gpt-5")
    [(path, text)] = harness.config_files(model, ENDPOINT).items()
    config = tomllib.loads(text)
    assert path == ".kimi/config.toml"
    assert config["default_model"] == "gpt-5" and config["telemetry"] is False
    assert config["models"]["gpt-5"] == {"provider": "agentcompass", "model": "gpt-5", "max_context_size": 262144}
    assert config["providers"]["agentcompass"] == {"type": "openai_legacy", "base_url": ENDPOINT.openai_base_url,
                                                   "api_key": ""}
    env = harness.cli_env(model, ENDPOINT)
    assert env["OPENAI_API_KEY"] == ENDPOINT.api_key and env["OPENAI_BASE_URL"] == ENDPOINT.openai_base_url
    command = harness.command(model, "/app")
    assert command.startswith("kimi --print --output-format stream-json") and command.endswith('< "$PROMPT_FILE"')
    assert ENDPOINT.api_key not in text + command


def test_a_model_id_with_toml_syntax_in_it_stays_one_model():
    model = preset("gpt-5").model_copy(update={"name": 'openai/org/m"x].y'})
    text = harness_of("kimi_cli").config_files(model, ENDPOINT)[".kimi/config.toml"]
    config = tomllib.loads(text)
    assert config["default_model"] == 'org/m"x].y' and list(config["models"]) == ['org/m"x].y']


def test_a_stub_release_is_refused_before_anything_is_downloaded():
    """1.52.0 prints a deprecation notice for any command line and exits 0: an attempt would 'complete' doing nothing."""
    from agentcompass.harnesses.kimi_cli import KimiCliHarness

    wanted = {k: v for k, v in settings("kimi_cli").items() if k not in ("name", "description", "needs_model")}
    for stub in ("1.52.0", "1.60", "2.0.1"):
        with pytest.raises(UserError, match="1.51.0"):
            KimiCliHarness(**{**wanted, "version": stub})
    assert KimiCliHarness(**{**wanted, "version": "1.49.0"}).settings.version == "1.49.0"


def test_usage_without_the_gateway_is_calls_and_an_unknown_cost():
    usage = harness_of("kimi_cli").read_usage(RUN + RESUME)
    assert usage.model_calls == 2 and usage.cost_known is False
    assert harness_of("kimi_cli").reports_tokens is False


@pytest.mark.parametrize(("stdout", "code", "timed_out", "expected"), [
    (printed(401, "Incorrect API key provided.", "invalid_request_error"), 1, False, AgentAuthenticationError),
    (printed(404, "scripted failure 404"), 1, False, ModelNotFoundError),
    (printed(400, "scripted failure 400"), 1, False, BadRequestError),
    (printed(429, "scripted failure 429"), 75, False, ApiRateLimitError),
    (printed(500, "scripted failure 500"), 75, False, ApiInternalServerError),
    ("Connection error.\n", 75, False, ApiInternalServerError),
    (RUN + CONTEXT, 1, False, ContextWindowExceededError),
    (RUN, 0, True, AgentTimeoutError),
    ("Max number of steps reached: 100\n", 1, False, NonZeroAgentExitCodeError),
])
def test_its_exits_map_onto_the_error_classes(stdout, code, timed_out, expected):
    error = harness_of("kimi_cli").classify(code, timed_out, stdout, RESUME, 60.0, None)
    assert type(error) is expected, error


def test_a_clean_run_is_no_error():
    assert harness_of("kimi_cli").classify(0, False, RUN, RESUME, 60.0, None) is None


@pytest.mark.slow
def test_kimi_clis_own_loader_reads_the_config_and_takes_the_key_from_the_environment(bundles, tmp_path):  # noqa: F811
    """The bundled kimi-cli's own config model and env override: the provider and model it will call with."""
    harness = harness_of("kimi_cli")
    harness.settings.cache_dir = str(bundles)
    harness.prepare()
    assert harness.archive is not None
    with tarfile.open(harness.archive) as tar:
        tar.extractall(tmp_path / "agent", filter="tar")
    config = tmp_path / "config.toml"
    config.write_text(harness.config_files(preset("gpt-5"), ENDPOINT)[".kimi/config.toml"])
    probe = ("import sys; from pathlib import Path; from kimi_cli.config import load_config; "
             "from kimi_cli.llm import augment_provider_with_env_vars; c = load_config(Path(sys.argv[1])); "
             "m = c.models[c.default_model]; p = c.providers[m.provider]; augment_provider_with_env_vars(p, m); "
             "print(p.type, p.base_url, p.api_key.get_secret_value(), m.model, m.max_context_size, c.telemetry)")
    done = subprocess.run([str(tmp_path / "agent/py/bin/python3.13"), "-I", "-c", probe, str(config)],
                          capture_output=True, text=True, timeout=120, env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin",
                          **harness.cli_env(preset("gpt-5"), ENDPOINT)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["openai_legacy", ENDPOINT.openai_base_url, ENDPOINT.api_key, "gpt-5", "262144",
                                   "False"]


@pytest.mark.slow
def test_kimi_cli_fixes_the_offline_demo_task_on_docker(tmp_path, bundles, base_image):  # noqa: F811
    """The shipped task (no internet) on docker's default bridge, kimi-cli from its PyPI bundle on the bundled
    CPython, the scripted server behind the run's gateway: solved, the server's tokens and cost, no key anywhere; the
    tier on every request (the gateway sets it), each one the chat completions API takes (the openai SDK's types)."""
    from api_requests import problems

    llm = FakeLLM(FIX_COMMANDS, api_key=API_KEY, finish="Fixed.")
    trial, directory, watch = run_cli_agent(tmp_path, bundles, "kimi_cli", llm, "model.reasoning=high", env="docker")
    assert_solved(trial, directory, llm, "kimi_cli", watch, preset="gpt-5")
    assert all(r.body.get("stream") is True for r in llm.successes)
    assert {r.body.get("reasoning_effort") for r in llm.requests + llm.checks} == {"high"}
    assert [p for r in llm.requests + llm.checks for p in problems("chat", r.body)] == []
    assert (directory / "tasks" / TASK / "attempt-1" / "kimi_cli.jsonl").read_text().count('"role":"assistant"') >= 3
