"""opencode, claude_code and codex end to end: each CLI really installed from npm (once per test session),
run in real sandboxes against a scripted model server that speaks OpenAI chat-completions, the Responses
API and Anthropic messages, streamed, with tool calls."""

from __future__ import annotations

import json
import os
import shutil
import tarfile
import textwrap
import threading
import uuid
from pathlib import Path

import pytest
import yaml

from conftest import REPO, run_cli
from docker_networks import subnet_only_network
from fake_llm_server import FakeLLM, FakeLLMServer
from shared_cache import cache_dir

pytestmark = pytest.mark.slow  # npm installs (once per session) and real CLIs; never skipped

TASK = "fix-median-bug"
API_KEY = "sk-test-installed-5f2c9e1a7b"
# What a competent agent does in the CLI's own shell tool: see the failure, fix the off-by-one, check.
FIX_COMMANDS = [
    "python3 -m unittest test_stats 2>&1 | tail -3",
    "sed -i 's/return (data\\[mid\\] + data\\[mid + 1\\]) \\/ 2/return (data[mid - 1] + data[mid]) \\/ 2/' stats.py"
    " && python3 -m unittest test_stats",
]
# Harness -> a model preset whose API it speaks (the scripted server answers any model name).
PRESETS = {"opencode": "gpt-5", "claude_code": "claude-sonnet-4-5", "codex": "gpt-5.5"}  # models each pinned CLI knows
PRICED_AS = {"gpt-5": "gpt-5", "gpt-5.5": "gpt-5.5", "claude-sonnet-4-5": "claude-sonnet-4-5-20250929"}  # litellm's map
BRIDGE_HOST = "172.17.0.1"
CODEX_BINARY = "@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex"  # the docker bridge's gateway: the host as containers on it see it


@pytest.fixture(scope="session")
def cli_cache() -> Path:
    """One npm install per (CLI, version) for every test worker and every run of the suite on this machine
    (the bundle's own lock makes parallel workers wait for one install); AGENTCOMPASS_TEST_CLI_CACHE names
    another dir."""
    kept = os.environ.get("AGENTCOMPASS_TEST_CLI_CACHE")
    return Path(kept) if kept else cache_dir("cli-agents")


def online_demo(tmp: Path) -> Path:
    """A config dir with `demo_online`: the demo's fix-median-bug with the network on (until the model
    gateway lands, the CLI in the sandbox calls the scripted server itself)."""
    root = tmp / "conf"
    task = root / "recipes" / "demo_online" / TASK
    shutil.copytree(REPO / "recipes" / "demo" / TASK, task, dirs_exist_ok=True)
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace("allow_internet = false", "allow_internet = true"))
    (root / "recipes" / "demo_online.yaml").write_text(textwrap.dedent("""
        name: demo_online
        description: the demo's fix-median-bug with internet (tests of installed CLIs)
        format: harbor
        source: {path: demo_online}
        runs_on_host: true
        build_args:
          BASE_IMAGE: ${oc.env:AGENTCOMPASS_BASE_IMAGE,python:3.11-slim-bookworm}
    """))
    return root


def base_url(server: FakeLLMServer, preset: str, host: str) -> str:
    url = f"http://{host}:{server.port}"
    return url if preset.startswith("claude") else f"{url}/v1"


class ArgvWatch:
    """Every process's command line, sampled while a run goes on, to prove no argv holds the key."""

    def __init__(self, needle: str) -> None:
        self.needle, self.seen, self.samples = needle.encode(), [], 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.watch, daemon=True)

    def watch(self) -> None:
        while not self.stop.wait(0.05):
            self.samples += 1
            for proc in Path("/proc").iterdir():
                try:
                    argv = (proc / "cmdline").read_bytes()
                except OSError:
                    continue
                if self.needle in argv:
                    self.seen.append(argv.replace(b"\0", b" ").decode(errors="replace"))

    def __enter__(self) -> "ArgvWatch":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def run_agent(tmp: Path, cache: Path, harness: str, llm: FakeLLM, *args: str, env: str = "local",
              preset: str | None = None, host: str | None = None) -> tuple[dict, Path, ArgvWatch]:
    """`agentcompass run demo_online HARNESS PRESET` on the one task; the trial record, its dir, the argv watch."""
    preset = preset or PRESETS[harness]
    # The run name is unique: container names derive from it, and another test worker may run the same task.
    host = host or (BRIDGE_HOST if env == "docker" else "127.0.0.1")
    with FakeLLMServer(llm, host="0.0.0.0" if env == "docker" else "127.0.0.1") as server, ArgvWatch(API_KEY) as watch:
        proc = run_cli("run", "demo_online", harness, preset, "--env", env, "--config-dir", str(online_demo(tmp)),
                       "--model-base-url", base_url(server, preset, host),
                       "--no-model-check", f"harness.cache_dir={cache}", "--results-dir", str(tmp / "results"),
                       "--run-name", f"t-{uuid.uuid4().hex[:8]}", *args, cwd=tmp, timeout=900,
                       env={"AGENTCOMPASS_CACHE_DIR": str(tmp / "cache"), "HOME": str(tmp),
                            "OPENAI_API_KEY": API_KEY, "ANTHROPIC_API_KEY": API_KEY})  # never on a command line
    assert proc.returncode == 0, proc.stderr[-3000:]
    [directory] = [p.parent for p in (tmp / "results").glob("*/*/summary.json")]
    [trial] = [json.loads(line) for line in (directory / "trials.jsonl").read_text().splitlines()]
    return trial, directory, watch


def token_price(preset: str, usage: dict) -> float:
    """One reply's cost from litellm's bundled map itself (not through agentcompass's pricing)."""
    from agentcompass.core.models import import_litellm

    p = import_litellm().model_cost[PRICED_AS[preset]]
    cached = usage.get("prompt_tokens_details", {}).get("cached_tokens", 0)
    return ((usage["prompt_tokens"] - cached) * p["input_cost_per_token"] + cached * p["cache_read_input_token_cost"]
            + usage["completion_tokens"] * p["output_cost_per_token"])


def files_containing(root: Path, needle: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and needle.encode() in p.read_bytes()]


def assert_solved(trial: dict, directory: Path, llm: FakeLLM, harness: str, watch: ArgvWatch,
                  preset: str | None = None) -> None:
    assert trial["status"] == "passed", trial
    assert len(llm.successes) >= len(FIX_COMMANDS) + 1  # each command, then the closing text
    assert all(r.authorization == f"Bearer {API_KEY}" for r in llm.requests)
    # Streamed or not, the trial's tokens are the server's: every figure the server sent is counted, the
    # tool-less calls a CLI makes on the side (opencode's title) included, as the gateway meters every call.
    usages = [r.usage for r in llm.successes] + [r.usage for r in llm.checks if r.status == 200]
    usage = trial["usage"]
    assert usage["tokens_in"] == sum(u["prompt_tokens"] for u in usages)
    assert usage["tokens_out"] == sum(u["completion_tokens"] for u in usages)
    assert usage["tokens_cached"] == sum(u.get("prompt_tokens_details", {}).get("cached_tokens", 0) for u in usages)
    # Every CLI priced alike: the server's tokens x the model's price (codex gives no cost of its own).
    assert usage["cost_known"] is True
    assert usage["cost_usd"] == pytest.approx(sum(token_price(preset or PRESETS[harness], u) for u in usages), rel=1e-6)
    transcript = directory / "tasks" / TASK / "attempt-1" / f"{harness}.jsonl"
    assert transcript.is_file() and "mid - 1" in transcript.read_text()
    assert files_containing(directory.parent, API_KEY) == []
    assert watch.samples > 10 and watch.seen == []


@pytest.mark.parametrize("harness", ["opencode", "claude_code", "codex"])
def test_each_cli_fixes_the_demo_task_on_local(harness, tmp_path, cli_cache):
    llm = FakeLLM(FIX_COMMANDS, api_key=API_KEY, finish="Fixed: median() now averages the two middle values.")
    workspaces = tmp_path / "workspaces"  # kept after the trial, to search the sandbox's files for the key
    trial, directory, watch = run_agent(tmp_path, cli_cache, harness, llm, f"env.root={workspaces}",
                                        "run.keep_environment=true")
    assert_solved(trial, directory, llm, harness, watch)
    assert llm.successes[0].body.get("stream") is True  # every CLI streams
    assert (workspaces / next(workspaces.iterdir()).name / "fs" / "app" / "stats.py").is_file()
    assert files_containing(workspaces, API_KEY) == []


def test_opencode_speaks_anthropic_too(tmp_path, cli_cache):
    llm = FakeLLM(FIX_COMMANDS, api_key=API_KEY, finish="Fixed.")
    trial, directory, watch = run_agent(tmp_path, cli_cache, "opencode", llm, preset="claude-sonnet-4-5")
    assert_solved(trial, directory, llm, "opencode", watch, preset="claude-sonnet-4-5")
    assert {r.api for r in llm.requests} == {"messages"}


@pytest.fixture
def user_network(base_image):
    """A network made with `--subnet` alone (no gateway in its IPAM on Debian's docker.io, as the default bridge)."""
    with subnet_only_network("ac-cli", 150) as made:
        yield made


@pytest.mark.parametrize("network", ["default-bridge", "user-network"])
@pytest.mark.parametrize("harness", ["opencode", "claude_code", "codex"])
def test_each_cli_fixes_the_demo_task_on_docker(harness, network, tmp_path, cli_cache, base_image, request):
    """On the default bridge of Debian's docker.io (20.10), whose IPAM lists no gateway, and on a user network."""
    llm = FakeLLM(FIX_COMMANDS, api_key=API_KEY, finish="Fixed.")
    args, host = (), None
    if network == "user-network":
        name, host = request.getfixturevalue("user_network")
        args = ("--env-params", json.dumps({"network": name}))
    trial, directory, watch = run_agent(tmp_path, cli_cache, harness, llm, *args, env="docker", host=host)
    assert_solved(trial, directory, llm, harness, watch)


@pytest.mark.parametrize("tier", ["none", "high", "max"])
def test_claude_codes_requests_at_each_tier_are_ones_the_messages_api_takes(tier, tmp_path, cli_cache):
    """Every request the real Claude Code sends, after the gateway set the tier, validated with the anthropic SDK's
    own request types (it calls /v1/messages?beta=true: the beta types); tier none sends no thinking at all."""
    from api_requests import problems

    llm = FakeLLM(FIX_COMMANDS, api_key=API_KEY, finish="Fixed.")
    trial, _, _ = run_agent(tmp_path, cli_cache, "claude_code", llm, f"model.reasoning={tier}")
    assert trial["status"] == "passed", trial
    wanted = yaml.safe_load((REPO / "conf/models/claude-sonnet-4-5.yaml").read_text())["reasoning_map"][tier]
    for request in llm.requests + llm.checks:
        assert problems("messages", request.body, beta=True, extensions=frozenset({"temperature"})) == [], request.body
        if "thinking" in wanted:
            assert {k: v for k, v in request.body["thinking"].items() if k != "display"} == wanted["thinking"]
        else:
            assert request.body.get("thinking", {"type": "disabled"}) == {"type": "disabled"}


def test_codex_declares_the_models_its_pinned_version_lists(cli_cache):
    """harnesses/codex.yaml's models are those the pinned binary's bundled model list offers the API, tier for tier."""
    from agentcompass.harnesses.cli_bundle import bundle

    settings = yaml.safe_load((REPO / "harnesses/codex.yaml").read_text())
    archive = bundle("@openai/codex", settings["version"], CODEX_BINARY, "codex", cli_cache)
    with tarfile.open(archive) as tar:
        data = tar.extractfile("bin/codex").read()
    start = data.rfind(b'{\n  "models"', 0, data.find(b'"slug": '))
    listed, _ = json.JSONDecoder().raw_decode(data[start:].decode("utf-8", errors="replace"))
    offered = {m["slug"]: [level["effort"] for level in m["supported_reasoning_levels"]] for m in listed["models"]
               if m.get("supported_in_api") and m.get("visibility") == "list"}
    assert settings["models"] == offered


@pytest.mark.parametrize("harness", ["opencode", "claude_code", "codex"])
def test_nop_like_replies_leave_the_task_unsolved(harness, tmp_path, cli_cache):
    llm = FakeLLM(["ls"], api_key=API_KEY, finish="All done.")
    trial, _, _ = run_agent(tmp_path, cli_cache, harness, llm)
    assert trial["status"] == "failed" and trial["error_category"] is None, trial
    assert trial["agent_exit_status"] == "completed"


@pytest.mark.parametrize("harness", ["opencode", "claude_code", "codex"])
def test_a_rejected_key_is_the_agents_error_not_retried(harness, tmp_path, cli_cache):
    llm = FakeLLM(FIX_COMMANDS, api_key="sk-some-other-key", finish="Fixed.")
    trial, _, _ = run_agent(tmp_path, cli_cache, harness, llm, "harness.env={CLAUDE_CODE_MAX_RETRIES: '1'}")
    assert trial["status"] == "error" and trial["error_category"] == "agent", trial
    assert "rejected the API key" in trial["message"] and "401" in trial["message"]
    assert trial["attempt"] == 1 and len(list((tmp_path / "results").rglob("attempt-*"))) == 1


@pytest.mark.parametrize("harness", ["opencode", "claude_code", "codex"])
def test_an_endpoint_outage_is_infra_and_retried(harness, tmp_path, cli_cache):
    llm = FakeLLM(FIX_COMMANDS, api_key=API_KEY, outage_after=0, finish="Fixed.")
    trial, _, _ = run_agent(tmp_path, cli_cache, harness, llm, "run.max_retries=1", "run.retry_backoff_s=0",
                            "harness.timeout_s=120", "harness.env={CLAUDE_CODE_MAX_RETRIES: '1'}")
    assert trial["status"] == "error" and trial["error_category"] == "infra", trial
    assert "kept failing" in trial["message"]
    assert {r.status for r in llm.requests} == {503}


def test_a_crashing_cli_is_graded_with_its_last_output(tmp_path, cli_cache):
    """Harbor's NonZeroAgentExitCodeError: graded, the reward counts (here nothing was done: failed)."""
    llm = FakeLLM(FIX_COMMANDS, api_key=API_KEY, finish="Fixed.")
    trial, _, _ = run_agent(tmp_path, cli_cache, "codex", llm, "harness.args=[--no-such-flag]")
    assert (trial["status"], trial["error_category"], trial["reward"]) == ("failed", None, 0.0), trial
    assert trial["details"]["error_class"] == "NonZeroAgentExitCodeError"
    assert "exited with code" in trial["message"] and "--no-such-flag" in trial["message"]
    assert llm.requests == []


def test_a_cli_hanging_past_its_time_limit_is_graded(tmp_path, cli_cache):
    """Harbor's AgentTimeoutError: graded, the reward counts (here the model never answered in time: failed)."""
    llm = FakeLLM(FIX_COMMANDS, api_key=API_KEY, finish="Fixed.", delay_s=60)
    trial, directory, _ = run_agent(tmp_path, cli_cache, "claude_code", llm, "harness.timeout_s=8")
    assert (trial["status"], trial["error_category"], trial["reward"]) == ("failed", None, 0.0), trial
    assert trial["details"]["error_class"] == "AgentTimeoutError"
    assert "ran past the agent time limit of 8 s" in trial["message"]
    # A timed-out attempt is a failed one: in the rate, not out of it.
    summary = json.loads((directory / "summary.json").read_text())
    assert (summary["pass_at_1"], summary["pass_at_1_tasks"], summary["failed"], summary["complete"]) == (0.0, 1, 1, True)


@pytest.mark.parametrize("harness", ["opencode", "claude_code", "codex"])
def test_a_cli_that_fixed_the_task_then_hung_on_a_stalled_endpoint_is_graded_and_passes(harness, tmp_path, cli_cache):
    """Harbor's AgentTimeoutError after the work is done: graded, and the reward counts (issue 37)."""
    llm = FakeLLM(FIX_COMMANDS, api_key=API_KEY, finish="Fixed.", stall_after=len(FIX_COMMANDS), stall_s=120)
    trial, directory, _ = run_agent(tmp_path, cli_cache, harness, llm, "harness.timeout_s=45")
    assert (trial["status"], trial["reward"], trial["error_category"]) == ("passed", 1.0, None), trial
    assert trial["details"]["error_class"] == "AgentTimeoutError" and "ran past the agent time limit" in trial["message"]
    summary = json.loads((directory / "summary.json").read_text())
    assert (summary["pass_at_1"], summary["pass_at_1_tasks"], summary["complete"]) == (1.0, 1, True)


@pytest.mark.parametrize(("harness", "preset"), [("claude_code", "gpt-5"), ("codex", "claude-opus-4-5"),
                                                 ("claude_code", "glm-5.2")])
def test_a_model_api_the_cli_cannot_speak_is_refused_before_the_run(harness, preset, tmp_path):
    proc = run_cli("run", "demo", harness, preset, "--env", "local", "--results-dir", str(tmp_path / "results"),
                   cwd=tmp_path)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and f"harness '{harness}' speaks the" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "results").exists()


def test_list_harnesses_shows_the_three_clis():
    proc = run_cli("list", "harnesses")
    names = {line.split()[0] for line in proc.stdout.splitlines() if line.startswith("  ")}
    assert {"opencode", "claude_code", "codex"} <= names


def test_reasoning_tiers_reach_the_endpoint_through_the_gateway(tmp_path, cli_cache):
    """Issue 12 point 4: a three-tier sweep of opencode on glm-5.2; every request carries its tier's fields.
    opencode cannot send chat_template_kwargs itself: the run's model gateway adds them."""
    llm = FakeLLM(FIX_COMMANDS, finish="Fixed.")
    with FakeLLMServer(llm) as server:
        proc = run_cli("run", "demo", "opencode", "glm-5.2", "-m", "model.reasoning=none,high,max", "--env", "local",
                       # without bubblewrap: the sweep's three jobs share one host network (bwrap's offline
                       # gateway reach is tests/test_local_gateway_offline.py's)
                       "--env-params", json.dumps({"isolation": "none"}),
                       "--model-base-url", server.base_url, "--benchmark-params", json.dumps({"sample_ids": [TASK]}),
                       f"harness.cache_dir={cli_cache}", "--results-dir", str(tmp_path / "results"),
                       "--run-name", "sweep", cwd=tmp_path, timeout=900,
                       env={"AGENTCOMPASS_CACHE_DIR": str(tmp_path / "cache"), "HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    trials = [json.loads(line) for path in (tmp_path / "results").rglob("trials.jsonl")
              for line in path.read_text().splitlines()]
    assert [t["status"] for t in trials] == ["passed"] * 3
    kwargs = [json.dumps(r.body.get("chat_template_kwargs"), sort_keys=True) for r in llm.requests]
    assert set(kwargs) == {json.dumps({"enable_thinking": False}), json.dumps({"reasoning_effort": "high"}), "null"}
    assert all(r.body.get("chat_template_kwargs") in (None, {"enable_thinking": False}, {"reasoning_effort": "high"})
               for r in llm.checks)
