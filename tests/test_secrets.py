"""Secrets by value: a distinctive key planted in each place a secret can come from (an environment variable,
--model-api-key, --model-api-key-file and standard input, a private --config, the Authorization and x-api-key
headers of extra_headers, a base URL's userinfo and ?key=) reaches no file a run writes (results, Hydra's
multirun.yaml, logs), no line of stdout or stderr, and, while the run is in progress, no /proc/*/cmdline.
Real runs of the demo through the model gateway against a scripted endpoint, a Hydra sweep among them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import run_cli
from gateway_upstream import ScriptedUpstream, serving

REPO = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
KEYS = {
    "env": "sk-plant-ENV-7f3a91", "cli": "sk-plant-CLI-2b8e44", "file": "sk-plant-FILE-9c1d07",
    "stdin": "sk-plant-STDIN-5e6f12", "config": "sk-plant-CONFIG-3a4b55", "authorization": "sk-plant-AUTHZ-8d9e66",
    "x-api-key": "sk-plant-XAPI-1f2a77", "userinfo": "plant-PASS-4c5d88", "query": "sk-plant-QUERY-6e7f99",
}


class AnyKey(str):
    """The scripted endpoint's key when every planted key is sent at once: it takes whichever it is given."""

    def __ne__(self, other: object) -> bool:
        return False


def leaks(root: Path, *texts: str) -> list[str]:
    """Where any planted key appears: each file under root (by path) and each text given (by position)."""
    found = [f"{path}: {name}" for path in root.rglob("*") if path.is_file()
             for name, key in KEYS.items() if key in path.read_text(errors="replace")]
    return found + [f"output {i}: {name}" for i, text in enumerate(texts) for name, key in KEYS.items() if key in text]


def command_lines() -> str:
    """Every process's command line on this host, as `ps` shows it to any local user."""
    lines = []
    for entry in Path("/proc").iterdir():
        try:
            lines.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:  # not a process, or gone
            continue
    return "\n".join(lines)


@pytest.fixture
def workspace(tmp_path: Path) -> dict[str, Path]:
    """`out`: everything a run may write (results, the working dir where Hydra would write); `private`: the
    files the user keeps the secrets in (a --config, the key file), which are not the runner's to scrub."""
    out, private = tmp_path / "out", tmp_path / "private"
    (out / "cwd").mkdir(parents=True)
    (private / "config" / "harnesses").mkdir(parents=True)
    (private / "config" / "harnesses" / "gateway_probe.yaml").write_text(
        "name: gateway_probe\ndescription: the gateway's test harness\nimpl: gateway_probe:GatewayProbe\n"
        "needs_model: true\nmode: calls\n")
    (private / "private.yaml").write_text(json.dumps({"model": {"api_key": KEYS["config"],
                                                                "params": {"extra_headers": {"x-api-key": KEYS["x-api-key"]}}}}))
    (private / "key.txt").write_text(KEYS["file"] + "\n")
    return {"out": out, "private": private}


def run_args(ws: dict[str, Path], base_url: str, run_name: str, *extra: str) -> list[str]:
    return ["run", "demo", "gateway_probe", "glm-5.2", "--model-base-url", base_url,
            "--config-dir", str(ws["private"] / "config"), "--benchmark-params", '{"sample_ids": ["fix-median-bug"]}',
            "--env-params", '{"isolation": "none"}', "--results-dir", str(ws["out"] / "results"), "--run-name", run_name, *extra]


ENV = {"PYTHONPATH": os.pathsep.join([str(REPO), str(TESTS)]), "GLM_API_KEY": KEYS["env"]}


def test_a_sweep_with_a_key_in_every_place_writes_and_prints_none_and_hides_it_from_ps(workspace):
    script = ScriptedUpstream(key=AnyKey("any"))
    script.gate = threading.Event()  # the first streamed reply waits: the run is in progress while /proc is read
    with serving(script) as url:
        base = url.replace("http://", f"http://plant-user:{KEYS['userinfo']}@") + "/v1"
        headers = json.dumps({"extra_headers": {"Authorization": f"Bearer {KEYS['authorization']}"}})
        args = run_args(workspace, base, "sweep", "--model-api-key", KEYS["cli"], "--config",
                        str(workspace["private"] / "private.yaml"), "--model-params", headers, "--no-model-check",
                        "-m", "model.reasoning=none,high")  # the preflight's console: the next test
        proc = subprocess.Popen([sys.executable, "-m", "agentcompass", *args], cwd=workspace["out"] / "cwd",
                                env={**os.environ, **ENV}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 120
            while not any(r.body.get("stream") for r in script.received) and proc.poll() is None:
                assert time.monotonic() < deadline, "the run never streamed a reply"
                time.sleep(0.05)
            listed = command_lines()
        finally:
            script.gate.set()
            stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-3000:]
    assert [name for name, key in KEYS.items() if key in listed] == []
    results = workspace["out"] / "results" / "sweep"
    assert (results / "multirun.yaml").is_file() and len(list(results.glob("*/run.json"))) == 2
    assert leaks(workspace["out"], stdout, stderr) == []
    run_info = json.loads(next(results.glob("*/run.json")).read_text())  # what was masked is still said to be there
    assert run_info["config"]["model"]["params"]["extra_headers"] == {"Authorization": "***", "x-api-key": "***"}
    assert run_info["config"]["model"]["base_url"].startswith("http://***@127.0.0.1:")


def test_a_key_from_a_file_or_stdin_is_used_and_written_nowhere(workspace):
    script = ScriptedUpstream(key=KEYS["file"])  # the run passes only if the file's key went over the wire
    with serving(script) as url:
        done = run_cli(*run_args(workspace, f"{url}/v1", "fromfile", "--model-api-key-file",
                                 str(workspace["private"] / "key.txt"), "--no-model-check"), cwd=workspace["out"] / "cwd", env=ENV)
        assert done.returncode == 0, done.stderr[-3000:]
        (result,) = (workspace["out"] / "results" / "fromfile").glob("*/tasks/fix-median-bug/attempt-1/result.json")
        assert json.loads(result.read_text())["usage"]["model_calls"] == 2
        # standard input; the endpoint refuses the x-api-key header of the private --config and echoes it in its 401
        refused = run_cli(*run_args(workspace, f"{url}/v1", "fromstdin", "--model-api-key-file", "-", "--config",
                                    str(workspace["private"] / "private.yaml")),
                          cwd=workspace["out"] / "cwd", env=ENV, stdin=KEYS["stdin"] + "\n")
    assert refused.returncode == 2 and "Incorrect API key provided: ***" in refused.stderr, refused.stderr
    assert leaks(workspace["out"], done.stdout, done.stderr, refused.stdout, refused.stderr) == []


def test_config_show_masks_url_credentials_and_auth_headers(workspace):
    url = f"https://plant-user:{KEYS['userinfo']}@llm.internal/v1?api-version=2024-06-01&key={KEYS['query']}"
    done = run_cli("config", "show", "demo", "nop", "openai/some-model", "--model-base-url", url, "--env", "local",
                   f"model.params.extra_headers.x-api-key={KEYS['x-api-key']}", "model.params.extra_headers.X-Title=mine",
                   cwd=workspace["out"] / "cwd", env=ENV)
    assert done.returncode == 0, done.stderr
    assert "https://***@llm.internal/v1?api-version=2024-06-01&key=***" in done.stdout
    assert "x-api-key: '***'" in done.stdout and "X-Title: mine" in done.stdout  # a harmless header stays readable
    assert leaks(workspace["out"], done.stdout, done.stderr) == []


@pytest.mark.parametrize("case", ["missing", "empty", "both"])
def test_a_bad_key_file_is_one_line_and_nothing_written(workspace, case):
    empty = workspace["private"] / "empty.txt"
    empty.write_text("\n")
    flags, said = {"missing": (["--model-api-key-file", str(workspace["private"] / "nope.txt")], "cannot read"),
                   "empty": (["--model-api-key-file", str(empty)], "is empty"),
                   "both": (["--model-api-key-file", str(workspace["private"] / "key.txt"), "--model-api-key", KEYS["cli"]],
                            "not both")}[case]
    done = run_cli(*run_args(workspace, "http://127.0.0.1:9/v1", "bad", *flags), cwd=workspace["out"] / "cwd", env=ENV)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and said in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and not (workspace["out"] / "results").exists()
    assert leaks(workspace["out"], done.stdout, done.stderr) == []
