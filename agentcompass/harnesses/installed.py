"""What the installed CLI agents (opencode, claude_code, codex) share: install, configure, run, read back.

Install: the CLI's npm package at the pinned `version` is installed once per (package, version) on the
host, into the cache (agentcompass.harnesses.cli_bundle), only once the run's cheap checks have passed; most npm CLIs here ship a native Linux binary as an
optional dependency (the JavaScript ones bring their own Node instead: harnesses/node_bundle.py), so the sandbox needs
no Node and no internet: the binary alone goes in, gzipped,
through the sandbox's file API, and is unpacked under AGENT_DIR. Configure: the endpoint and key are
written into the sandbox as the CLI's own config file and an env file (mode 600) that the command
sources, so no command line shows the key; AGENT_DIR is removed after the run. Run: headless, in the
task's workdir, the task's agent timeout (or `timeout_s`, multiplied as the task's is) as a hard limit; stdout (the CLI's JSON
events) is kept in the trial dir as `<harness>.jsonl`, stderr as `agent.log`, the key scrubbed.

The endpoint is the run's model gateway when the runner gives the trial one (`trial.gateway`), else the
model preset's own base_url and key. Usage: the gateway's metering when there is one (each call's tokens x
the model's price), else the CLI's own token counts x the same price; either way the CLI's own cost figure,
where it gives one, is kept beside as `cli_cost_usd`. Errors, as Harbor's installed agents name them
(core/errors.py): a hang past the time limit is AgentTimeoutError and a non-zero exit NonZeroAgentExitCodeError,
both graded with their reward counting (a CLI that finished its work and then hung or crashed passes); 401/403
from the endpoint is AgentAuthenticationError, 404 ModelNotFoundError, 400/422 BadRequestError; an endpoint that
kept failing (5xx, unreachable) is ApiInternalServerError and 429 ApiRateLimitError, both retried. The CLI's last
output is in the message.

Where those statuses come from: with the gateway (every run the runner starts), from the gateway's own record of the
status it answered each of this trial's calls with (`endpoint.usage()["statuses"]`, see `gateway_verdict`), never
from what the CLI printed: the model's tools write into the same output, and a printed "401" or "429" would turn a
failed attempt into one that is not graded, retried or left out of the rate. A key refused, a model unknown or a
request refused count only when no call of the attempt was answered: the agent's tools run only after an answered
call, so such a status after one may be the agent's own doing (a request it sent itself with its token). Only without
a gateway (a harness run outside the runner, e.g. from the Python API with no gateway) is the printed output read,
through the harness's `endpoint_error`.

A new installed harness: subclass InstalledAgent and define `endpoint_error(output)` as its no-gateway fallback (it
may use `status_verdict` with a regex for the statuses its CLI prints; return None when it cannot tell). It is never
consulted when the gateway is in the path; `classify` (the shared hook) decides the class either way.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field

from agentcompass.core.errors import (AgentAuthenticationError, AgentTimeoutError, ApiInternalServerError,
                                      ApiRateLimitError, BadRequestError, InfraError, ModelNotFoundError,
                                      NonZeroAgentExitCodeError, SpendCapReached, TrialError)
from agentcompass.harnesses.cli_bundle import BUNDLE, INSTALL_TIMEOUT_S, bundle
from agentcompass.core.models import NO_KEY, api_key
from agentcompass.core.schema import Strict
from agentcompass.core.task import AgentOutcome, Task, Usage

if TYPE_CHECKING:
    from agentcompass.core.contracts import TaskFormat
    from agentcompass.core.sandbox import Sandbox
    from agentcompass.core.schema import ModelConfig
    from agentcompass.core.context import TrialContext

AGENT_DIR = "/tmp/agentcompass-agent"  # the CLI, its HOME, config and env file; removed after the run
HOME_DIR = f"{AGENT_DIR}/home"
DEFAULT_URLS = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com"}
LAST_OUTPUT_CHARS = 1500  # of the CLI's output, in an error's message
STOP_FILE = f"{AGENT_DIR}/stop"  # made at a spend cap: the CLI's watcher stops it
# Started beside the CLI in its own exec (so it shares the CLI's process namespace, which a later exec under bwrap
# does not): `$$` is the shell's pid, which `exec` hands to the CLI; it ends when the CLI does.
WATCH_CLI = (f"( p=$$; while kill -0 $p 2>/dev/null; do if [ -e {STOP_FILE} ]; then kill -TERM $p; sleep 2; "
             f"kill -KILL $p 2>/dev/null; exit 0; fi; sleep 1; done ) </dev/null >/dev/null 2>&1 &")
STOP_CLI = f"touch {STOP_FILE}"
CAP_POLL_S = 0.5


@dataclass(frozen=True)
class DirectEndpoint:
    """The model preset's own endpoint, as the gateway's GatewayEndpoint shapes it (without metering)."""

    openai_base_url: str
    anthropic_base_url: str
    api_key: str

    def usage(self) -> None:
        return None


def direct_endpoint(model: "ModelConfig") -> DirectEndpoint:
    """base_url and key of the preset (Anthropic's base without `/v1`: its clients append /v1/messages)."""
    base = (model.base_url or DEFAULT_URLS.get(model.api, DEFAULT_URLS["openai"])).rstrip("/")
    anthropic = base[: -len("/v1")] if base.endswith("/v1") else base
    return DirectEndpoint(openai_base_url=base, anthropic_base_url=anthropic, api_key=api_key(model) or NO_KEY)


def scrub(text: str, secret: str | None) -> str:
    return text.replace(secret, "***") if secret and secret != NO_KEY else text


# -- the harness -----------------------------------------------------------------------------
class InstalledAgent:
    """Subclasses name the package and say how the CLI is configured, run and read back."""

    needs_model = True
    uses_gateway = True  # the runner hands the trial a gateway endpoint (trial.gateway) when it runs one
    name: str
    package: str
    binary: str  # the native binary, relative to node_modules
    command_name: str
    model_apis: tuple[str, ...]  # the model presets' `api` values the CLI can speak
    log_files: str = ""  # the CLI's own log files (a shell glob): kept in agent.log, read even when it was killed
    reports_tokens = True  # False: the CLI prints no token counts, so without the gateway its cost stays unknown

    class Settings(Strict):
        version: str  # the npm package's version, pinned
        timeout_s: float | None = Field(None, gt=0)  # default: the task's agent timeout
        env: dict[str, str] = Field(default_factory=dict)  # added to the CLI's environment
        args: list[str] = Field(default_factory=list)  # added to the CLI's command line
        cache_dir: str | None = None  # where npm bundles are kept; default: the agentcompass cache
        models: dict[str, list[str]] | None = None  # model id -> tiers the pinned version knows; None: any

    def __init__(self, **settings: Any) -> None:
        self.settings = self.Settings.model_validate(settings)
        self.archive: Path | None = None  # fetched by prepare(), once every cheap check of the run has passed

    def prepare(self) -> None:
        """The CLI's bundle, from npm once per version (a progress bar and its size) or from the cache; the runner
        calls it last before the run, so a run refused for its network, key, model or env downloads nothing."""
        cache = Path(self.settings.cache_dir).expanduser() if self.settings.cache_dir else None
        self.archive = bundle(self.package, self.settings.version, self.binary, self.command_name, cache)

    # what each CLI defines
    def api_kind(self, model: "ModelConfig") -> str:
        """The API its model calls use: chat | responses | messages (the preflight sends one of the same)."""
        raise NotImplementedError

    def config_files(self, model: "ModelConfig", endpoint: Any) -> dict[str, str]:
        """Files to write under HOME_DIR (relative path -> text); never the key itself."""
        return {}

    def cli_env(self, model: "ModelConfig", endpoint: Any) -> dict[str, str]:
        """The CLI's environment (the key included: it goes into the env file, mode 600)."""
        raise NotImplementedError

    def command(self, model: "ModelConfig", workdir: str) -> str:
        """The shell command that runs the CLI on the prompt in $PROMPT_FILE."""
        raise NotImplementedError

    def read_usage(self, stdout: str) -> Usage:
        raise NotImplementedError

    def endpoint_error(self, output: str) -> str | None:
        """Only without a gateway (see the module's docstring): what the CLI's printed output says the endpoint last
        answered, one of status_verdict's values ("auth", "not_found", "bad_request", "rate_limit", "outage") or None."""
        return None

    # the shared run
    @property
    def extra_args(self) -> str:
        return shlex.join(self.settings.args)

    def time_limit_s(self, task: Task) -> float | None:
        """`timeout_s` in place of the task's agent timeout, capped and multiplied by the run's agent multiplier as
        the task's is (Harbor's `override_timeout_sec`); else the task's."""
        return task.agent_limit_s(self.settings.timeout_s)

    def run(
        self, task: Task, sandbox: "Sandbox", model: "ModelConfig", trial: "TrialContext", task_format: "TaskFormat"
    ) -> AgentOutcome:
        gateway = getattr(trial, "gateway", None)
        endpoint = gateway.endpoint(trial, sandbox) if gateway else direct_endpoint(model)
        secret = endpoint.api_key
        try:
            self.install(sandbox, INSTALL_TIMEOUT_S * task.agent_setup_scale)
            self.stage(sandbox, model, endpoint, task.instruction)
            limit = self.time_limit_s(task)
            done = threading.Event()
            stop_at_cap(sandbox, endpoint, done)
            try:  # `exec`: the CLI takes the shell's process id, which the watcher stops at a spend cap
                result = sandbox.exec(f"set -a; . {AGENT_DIR}/env; set +a; exec 0</dev/null; {WATCH_CLI} "
                                      f"exec {self.command(model, task.workdir)}", cwd=task.workdir, timeout=limit)
            finally:
                done.set()
            logs = sandbox.exec(f"cat {self.log_files} 2>/dev/null", timeout=60).stdout if self.log_files else ""
            sandbox.exec(f"rm -rf {AGENT_DIR}", timeout=60)  # the key and the CLI's state leave with it
            upstream = api_key(model)  # with a gateway the sandbox never held it; scrubbed all the same
            stdout, stderr = (scrub(scrub(text, secret), upstream) for text in (result.stdout, result.stderr + logs))
            trial.write(f"{self.name}.jsonl", stdout)
            trial.write("agent.log", stderr)
            if gateway:
                gateway.release(endpoint)  # first, so a call still in flight (a killed CLI's) is in the totals
            metered = endpoint.usage()
            reported = self.read_usage(stdout)
            usage = (gateway_usage(metered, reported) if metered
                     else priced(reported, model) if self.reports_tokens else reported)
            error = self.classify(result.exit_code, result.timed_out, stdout, stderr, limit, metered)
        finally:
            if gateway:
                gateway.release(endpoint)  # again on the way out of a failure: releasing is idempotent
        if error is not None:
            error.usage = usage
            raise error
        return AgentOutcome(exit_status="completed", usage=usage)

    def install(self, sandbox: "Sandbox", timeout_s: float = INSTALL_TIMEOUT_S) -> None:
        if self.archive is None:
            self.prepare()
        assert self.archive is not None
        sandbox.upload(self.archive, f"{AGENT_DIR}/{BUNDLE}")
        done = sandbox.exec(f"mkdir -p {HOME_DIR} && tar -xzf {AGENT_DIR}/{BUNDLE} -C {AGENT_DIR} "
                            f"&& rm {AGENT_DIR}/{BUNDLE} && HOME={HOME_DIR} {AGENT_DIR}/bin/{self.command_name} --version",
                            timeout=timeout_s)
        if not done.ok:
            raise InfraError(f"installing {self.package}@{self.settings.version} in the sandbox failed "
                             f"(exit {done.exit_code}): {(done.stdout + done.stderr).strip()[-300:]}")

    def stage(self, sandbox: "Sandbox", model: "ModelConfig", endpoint: Any, instruction: str) -> None:
        """The config files, the prompt and the env file (the key's only place), in one upload."""
        env = {"HOME": HOME_DIR, "PATH": f"{AGENT_DIR}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               "PROMPT_FILE": f"{AGENT_DIR}/prompt.md", **self.cli_env(model, endpoint), **self.settings.env}
        with tempfile.TemporaryDirectory(prefix="agentcompass-stage-") as tmp:
            staged = Path(tmp) / "agent"
            for relative, text in {**{f"home/{k}": v for k, v in self.config_files(model, endpoint).items()},
                                   "prompt.md": instruction,
                                   "env": "".join(f"{k}={shlex.quote(v)}\n" for k, v in env.items())}.items():
                path = staged / relative
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
                os.chmod(path, 0o600)
            sandbox.upload(staged, AGENT_DIR)

    def classify(self, code: int, timed_out: bool, stdout: str, stderr: str, limit: float | None,
                 metered: dict[str, Any] | None) -> TrialError | None:
        """The run's error class (core/errors.py), None for a clean exit. What the endpoint last answered decides
        first (a key refused, a model unknown, a request refused, an outage), then how the CLI ended."""
        if metered and metered.get("capped"):  # the gateway refused its calls and the CLI was stopped
            return SpendCapReached(f"{self.name} was stopped: {metered['capped']}")
        # With the gateway, its record alone says what the endpoint answered: the printed output is the agent's to forge.
        seen = gateway_verdict(metered) if metered is not None else self.endpoint_error(f"{stdout}\n{stderr}")
        ended_badly = timed_out or code != 0
        last = last_output(stdout, stderr)
        if seen == "auth":
            return AgentAuthenticationError(f"{self.name}: the model endpoint rejected the API key (HTTP 401/403); "
                                            f"last output: {last}")
        if seen == "not_found" and ended_badly:
            return ModelNotFoundError(f"{self.name}: the model endpoint does not know the model (HTTP 404); last output: {last}")
        # A 400 of the gateway's own (a field its policy refuses) is the agent's doing, not a broken harness: it must
        # not turn the attempt into one without a valid reward, so it ends as any other exit does below.
        refused_by_gateway = bool(metered and metered.get("refused"))
        if seen == "bad_request" and ended_badly and not refused_by_gateway:
            return BadRequestError(f"{self.name}: the model endpoint refused a request (HTTP 400/422); last output: {last}")
        if seen == "rate_limit" and ended_badly:
            return ApiRateLimitError(f"{self.name}: the model endpoint kept rate-limiting (HTTP 429); last output: {last}")
        if seen == "outage" and ended_badly:  # the last call's status: a transient 5xx the CLI got past is no outage
            return ApiInternalServerError(f"{self.name}: the model endpoint kept failing (5xx or unreachable); "
                                          f"last output: {last}")
        if timed_out:
            return AgentTimeoutError(f"{self.name} ran past the agent time limit of {limit:.0f} s and was stopped; "
                                     f"last output: {last}")
        if code != 0:
            return NonZeroAgentExitCodeError(f"{self.name} exited with code {code}; last output: {last}")
        return None


def stop_at_cap(sandbox: "Sandbox", endpoint: Any, done: threading.Event) -> None:
    """Stop the CLI once the gateway refuses its calls at a spend cap (it would otherwise go on, or retry):
    a thread waits on the endpoint's `capped` until the CLI's exec is done, then makes the watcher's stop file."""
    capped = getattr(endpoint, "capped", None)
    if capped is None:  # the preset's own endpoint: no gateway, no caps
        return

    def watch() -> None:
        while not done.is_set():
            if capped.wait(CAP_POLL_S):
                if not done.is_set():
                    try:
                        sandbox.exec(STOP_CLI, timeout=30)
                    except Exception:  # the sandbox went away: the CLI with it
                        pass
                return

    threading.Thread(target=watch, name="stop-at-spend-cap", daemon=True).start()


def json_events(stdout: str) -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines stream; other lines (banners, warnings) are skipped."""
    events = []
    for line in stdout.splitlines():
        if line.startswith("{"):
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(event, dict):
                events.append(event)
    return events


def verdict_of_status(status: int) -> str | None:
    """What one HTTP status says: "auth", "not_found", "bad_request", "rate_limit", "outage", else None."""
    if status in (401, 403):
        return "auth"
    return {404: "not_found", 400: "bad_request", 422: "bad_request", 429: "rate_limit"}.get(
        status, "outage" if status >= 500 else None)


def status_verdict(pattern: re.Pattern[str], output: str) -> str | None:
    """No gateway only: what the last HTTP status the CLI printed (pattern's group 1) says (verdict_of_status)."""
    statuses = [int(s) for s in pattern.findall(output)]
    return verdict_of_status(statuses[-1]) if statuses else None


# The classes whose status the agent could provoke itself once its tools run (a request of its own with its token:
# a malformed body, a bad header), and which would take the attempt out of the rate's base.
ONLY_BEFORE_ANY_ANSWER = ("auth", "not_found", "bad_request")


def gateway_verdict(metered: dict[str, Any]) -> str | None:
    """What the gateway's record of this trial's calls says the endpoint last answered (verdict_of_status's values).
    The statuses are the ones the gateway itself answered with (the upstream's, or its own 502/504 when the upstream
    broke off or timed out), never its policy refusals nor a spend cap's. A key refused, a model unknown or a request
    refused count only when no call was answered: a tool of the agent (which runs only after an answer) can send a
    malformed request through the gateway, and such an attempt is the agent's, graded like any other exit."""
    statuses = [int(s) for s in metered.get("statuses") or ()]
    if not statuses:
        return None
    seen = verdict_of_status(statuses[-1])
    if seen in ONLY_BEFORE_ANY_ANSWER and any(200 <= s < 300 for s in statuses):
        return None
    return seen


def last_output(stdout: str, stderr: str) -> str:
    text = " ".join((stdout.strip() + "\n" + stderr.strip()).split())
    return text[-LAST_OUTPUT_CHARS:] or "(none)"


def priced(reported: Usage, model: "ModelConfig") -> Usage:
    """Without the gateway (the CLI called the endpoint itself): the CLI's own token counts x the model's price,
    as the gateway prices its calls; the CLI's own cost figure (read_usage's cli_cost_usd) stays beside it."""
    from agentcompass.core.models import tokens_price

    usage = reported.model_copy()
    pricing = model.pricing
    if pricing is not None and pricing.hourly_usd is not None:
        usage.cost_usd, usage.cost_known = pricing.hourly_usd * usage.generation_s / 3600, True
    else:
        usage.cost_usd, usage.cost_known = tokens_price(model, usage.tokens_in, usage.tokens_out, usage.tokens_cached,
                                                        usage.tokens_cache_write)
    return usage


def gateway_usage(metered: dict[str, Any], reported: Usage) -> Usage:
    """The gateway's metering (what really crossed the wire), each call priced as it ended (tokens x the model's
    price, cache reads and writes included); the CLI's own cost figure beside it."""
    return Usage(model_calls=int(metered.get("calls", 0)), tokens_in=int(metered.get("tokens_in", 0)),
                 tokens_out=int(metered.get("tokens_out", 0)), tokens_cached=int(metered.get("tokens_cached", 0)),
                 tokens_cache_write=int(metered.get("tokens_cache_write", 0)),
                 generation_s=float(metered.get("generation_s", 0.0)), model_errors=int(metered.get("errors_5xx", 0)),
                 cost_usd=float(metered.get("cost_usd", 0.0)), cost_known=bool(metered.get("cost_known", True)),
                 cli_cost_usd=reported.cli_cost_usd)
