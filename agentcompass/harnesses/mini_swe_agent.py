"""mini_swe_agent: the real mini-swe-agent 2.x DefaultAgent, run as a library inside a trial.

Its Environment protocol is served by our sandbox (whatever the provider: mini_swe_environment.py), its
litellm model by our model config (agentcompass.core.models). The run ends when a command's output
starts with mini-swe-agent's submit line; what follows it is the submission. The
trajectory is written atomically to the trial dir after every step (`<task>.traj.json`,
mini-swe-agent's shape, so its inspector opens it), with the API key scrubbed.

Parity with mini-swe-agent's own SWE-bench runner: the prompt config's agent, model and
environment sections are used as they are (commands run as the config's interpreter, with
its env, cwd and timeout), its step and cost limits hold unless our settings name others,
an unsubmitted exit hands over an empty submission, and a context-window overflow is the
agent's exit, not an error. minisweagent and litellm load when the harness is built.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from pydantic import Field

from agentcompass.core.calls import CALLS_FILE
from agentcompass.core.errors import (AgentAuthenticationError, AgentError, AgentSafetyRefusalError, ApiInternalServerError,
                                      ApiRateLimitError, BadRequestError, InfraError, ModelNotFoundError, TrialError,
                                      UserError)
from agentcompass.core.paths import cache_root
from agentcompass.core.models import Meter, completion_kwargs, import_litellm, key_hint, request_timeout
from agentcompass.core.schema import Strict
from agentcompass.core.task import AgentOutcome, Task
from agentcompass.harnesses.mini_swe_environment import SUBMIT_LINE, SandboxEnvironment, sandbox_system_vars

if TYPE_CHECKING:
    from agentcompass.core.contracts import TaskFormat
    from agentcompass.core.sandbox import Sandbox
    from agentcompass.core.schema import ModelConfig
    from agentcompass.core.context import TrialContext

UNLIMITED_AGENT_LIFETIME_S = 24 * 3600.0
DEFAULT_COMMAND_TIMEOUT_S = 60.0
EXIT_STATUSES = {"Submitted": "submitted", "LimitsExceeded": "limits_exceeded", "TimeExceeded": "timeout",
                 "RepeatedFormatError": "format_error", "ContextWindowExceededError": "context_window_exceeded"}
# A prompt config whose submit command prints something after the submit line (the swebench
# configs' `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat patch.txt`) hands over that output.
SUBMITS_OUTPUT = re.compile(SUBMIT_LINE + r"\s*&&")
LITELLM_MODEL_CLASSES = ("litellm", "litellm_textbased", "litellm_response")  # what MeteredModel can wrap
MINI_KEY_HINT = " You can permanently set your API key with `mini-extra config set KEY VALUE`."
_import_lock = threading.Lock()


def import_minisweagent() -> Any:
    """minisweagent without its banner, its global config dir in our cache (it reads both at import)."""
    with _import_lock:
        os.environ["MSWEA_SILENT_STARTUP"] = "1"
        if not os.environ.get("MSWEA_GLOBAL_CONFIG_DIR"):  # an explicit setting wins; empty counts as unset
            os.environ["MSWEA_GLOBAL_CONFIG_DIR"] = str(cache_root() / "mini-swe-agent")
        import minisweagent

    return minisweagent


def load_prompt_config(spec: str) -> dict[str, Any]:
    """A built-in mini-swe-agent config name (mini, swebench, ...) or a YAML path."""
    import_minisweagent()
    from minisweagent.config import get_config_from_spec, get_config_path

    try:
        get_config_path(spec)
        data = get_config_from_spec(spec)
    except (FileNotFoundError, OSError) as exc:
        raise UserError(f"mini_swe_agent prompt_config '{spec}' not found; pass a built-in name "
                        f"(mini, swebench, ...) or a YAML file path") from exc
    except Exception as exc:  # yaml raises several kinds
        raise UserError(f"mini_swe_agent prompt_config '{spec}' is not valid YAML: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("agent"), dict):
        raise UserError(f"mini_swe_agent prompt_config '{spec}' needs an 'agent' mapping (system_template, instance_template)")
    return data


def scrub(text: str, secret: str | None) -> str:
    return text.replace(secret, "***") if secret else text


class ModelCallAbandoned(InfraError):
    """The run is stopping: the model call in flight is abandoned and not retried."""


class MeteredModel:
    """Mixed into a mini-swe-agent litellm model class: times requests, prices replies our way,
    bounds each request (connect and total timeouts) and stops retrying once the run stops."""

    meter: Meter
    stopping: threading.Event
    timeout: Any  # litellm's `timeout` (agentcompass.core.models.request_timeout)

    def _query(self, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
        if self.stopping.is_set():
            raise ModelCallAbandoned("interrupted")
        start = time.monotonic()
        try:
            bounded = {} if "timeout" in self.config.model_kwargs else {"timeout": self.timeout}  # type: ignore[attr-defined]
            return super()._query(messages, **{**bounded, **kwargs})  # type: ignore[misc]
        except Exception as exc:
            if self.stopping.is_set():  # a failure after Ctrl-C: no "Retrying in 60 seconds"
                raise ModelCallAbandoned("interrupted") from exc
            self.meter.failed()
            raise
        finally:
            self.meter.waited(time.monotonic() - start)

    def _calculate_cost(self, response: Any) -> dict[str, float]:
        """What DefaultAgent's cost_limit sees: only what the reply is billed per token (an hourly
        rate's share depends on queueing, so it counts in usage but never stops the agent)."""
        cost = self.meter.charge(response)
        return {"cost": 0.0 if self.meter.hourly else cost}

    def serialize(self) -> dict[str, Any]:
        data = super().serialize()  # type: ignore[misc]
        model_kwargs = data.get("info", {}).get("config", {}).get("model", {}).get("model_kwargs", {})
        if "api_key" in model_kwargs:
            model_kwargs["api_key"] = "***"
        return data


class TrialSavingAgent:
    """Mixed into DefaultAgent: `save` (called after every step) writes the trajectory atomically,
    in the shape mini-swe-agent's SWE-bench runner writes (`instance_id` included) plus our fields."""

    write_trajectory: Callable[[dict[str, Any]], None]
    trajectory_fields: dict[str, Any]

    def save(self, path: Path | None, *extra_dicts: dict[str, Any]) -> dict[str, Any]:
        data = self.serialize(*extra_dicts, self.trajectory_fields)  # type: ignore[attr-defined]
        self.write_trajectory(data)
        return data


@cache
def trial_model_class(base: type) -> type:
    # mini-swe-agent's retry loop gives up at once on these; ours joins them.
    aborts = [*getattr(base, "abort_exceptions", []), ModelCallAbandoned]
    return type(f"Metered{base.__name__}", (MeteredModel, base), {"abort_exceptions": aborts})


def run_abandonably(work: Callable[[], Any], stopping: threading.Event) -> Any:
    """`work()` in a daemon thread, so that on Ctrl-C the trial returns at once: a model call in
    flight, or mini-swe-agent's sleep between retries, cannot hold the run (the thread dies with it)."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = work()
        except BaseException as exc:  # handed to the trial's thread, which raises it
            outcome["error"] = exc

    thread = threading.Thread(target=target, name="mini-swe-agent", daemon=True)
    thread.start()
    while thread.is_alive():
        if stopping.wait(0.2):
            raise ModelCallAbandoned("interrupted")
        thread.join(0.05)
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


@cache
def trial_agent_class() -> type:
    from minisweagent.agents.default import DefaultAgent

    return type("TrialAgent", (TrialSavingAgent, DefaultAgent), {})


class MiniSweAgentHarness:
    needs_model = True
    extra, extra_modules = "agents", ("minisweagent", "litellm")  # checked before a run (registry.check_extra)

    class Settings(Strict):
        prompt_config: str = "mini"  # a built-in mini-swe-agent config name or a YAML path
        step_limit: int | None = Field(None, ge=0)  # model calls per trial; 0 = no limit; default: the config's
        cost_limit: float | None = Field(None, ge=0)  # USD billed per token per trial; 0 = no limit; default: the config's
        # The agent's wall-clock limit; 0: none (mini-swe-agent's own default, which the SWE-bench recipes
        # keep through their harness_defaults). Default: the task's agent timeout (Terminal-Bench's, Harbor's).
        wall_time_limit_s: float | None = Field(None, ge=0)
        command_timeout_s: float | None = Field(None, gt=0)  # default: the prompt config's, else 60
        env: dict[str, str] = Field(default_factory=dict)  # added to every command's environment
        submission: bool | None = None  # hand over the submitted text; default: when the config's submit command prints one

    def __init__(self, **settings: Any) -> None:
        self.settings = self.Settings.model_validate(settings)
        self.prompt = load_prompt_config(self.settings.prompt_config)
        model_class = (self.prompt.get("model") or {}).get("model_class") or "litellm"
        if model_class not in LITELLM_MODEL_CLASSES:
            raise UserError(f"mini_swe_agent prompt_config '{self.settings.prompt_config}' asks for model_class "
                            f"'{model_class}'; supported: {', '.join(LITELLM_MODEL_CLASSES)}")
        # Imported here, in the main thread, not in a trial: a slow import there would hold up Ctrl-C.
        import_litellm()  # before minisweagent's model module imports it: the offline price-map setting holds
        from minisweagent.models import get_model_class

        self.model_base = get_model_class("", model_class)
        trial_agent_class()
        templates = " ".join(str(v) for v in self.prompt["agent"].values())
        self.submits = self.settings.submission if self.settings.submission is not None else bool(
            SUBMITS_OUTPUT.search(templates))

    def wall_limit_s(self, task: Task) -> float | None:
        """The agent's wall-clock limit, None for none."""
        value = self.settings.wall_time_limit_s
        return task.agent_timeout_s if value is None else (value or None)

    def time_limit_s(self, task: Task) -> float | None:
        """How long the agent's phase may keep its sandbox: the wall limit, or without one a day (the longest
        a cloud sandbox lives), so that the platform still ends a sandbox whose orchestrator died."""
        return self.wall_limit_s(task) or UNLIMITED_AGENT_LIFETIME_S

    def run(
        self, task: Task, sandbox: "Sandbox", model: "ModelConfig", trial: "TrialContext", task_format: "TaskFormat"
    ) -> AgentOutcome:
        kwargs = completion_kwargs(model)
        secret = kwargs.get("api_key")
        meter = Meter(model, trial.dir / CALLS_FILE)
        wall_s = self.wall_limit_s(task) or 0
        lm = self._model(meter, kwargs)
        lm.stopping, lm.timeout = trial.stopping, request_timeout(model)
        env = self._environment(task, sandbox, trial, secret, wall_s)
        agent = trial_agent_class()(lm, env, **self.agent_config(wall_s))
        agent.trajectory_fields = {"instance_id": task.id, "agentcompass": {
            "task_id": task.id, "attempt": trial.attempt, "run_name": trial.run_name, "model": model.name,
            "labels": trial.labels, "usage": meter.usage}}
        agent.write_trajectory = lambda data: trial.write(
            f"{task.id}.traj.json", scrub(json.dumps(data, indent=2, default=pydantic_default), secret))
        try:
            info = run_abandonably(lambda: agent.run(task.instruction), trial.stopping)
        except TrialError as exc:
            exc.usage = meter.usage
            raise
        except Exception as exc:
            if not isinstance(exc, import_litellm().exceptions.ContextWindowExceededError):
                error = classify(exc, model, secret)
                error.usage = meter.usage  # every token spent, failed tries included, is paid for
                raise error from None
            # As mini-swe-agent's runner: the agent's own exit with nothing submitted, graded as such.
            info = {"exit_status": type(exc).__name__, "submission": "", "exception_str": str(exc)}
        raw_status = str(info.get("exit_status", ""))
        submitted = str(info.get("submission") or "") if raw_status == "Submitted" else ""
        return AgentOutcome(
            exit_status=EXIT_STATUSES.get(raw_status, raw_status.lower() or "completed"),
            submission=submitted if self.submits else None,
            usage=meter.usage,
            message=scrub(str(info.get("exception_str") or ""), secret)[:500],
        )

    def agent_config(self, wall_s: float) -> dict[str, Any]:
        """The prompt config's agent section; our limits only where set (the config's step and cost
        limits hold otherwise, as in mini-swe-agent's runner)."""
        config = {**self.prompt["agent"], "wall_time_limit_seconds": int(wall_s), "output_path": None}
        for key in ("step_limit", "cost_limit"):
            if getattr(self.settings, key) is not None:
                config[key] = getattr(self.settings, key)
        return config

    def _model(self, meter: Meter, kwargs: dict[str, Any]) -> Any:
        """The prompt config's litellm model class, metered, with our endpoint, key and tier fields."""
        model_cfg = {k: v for k, v in (self.prompt.get("model") or {}).items() if k not in ("model_class", "model_name")}
        model_cfg["model_kwargs"] = {**(model_cfg.get("model_kwargs") or {}), **kwargs}
        model_cfg["cost_tracking"] = "ignore_errors"  # pricing is ours (Meter): an unpriced model is no error
        if any(s in meter.name.lower() for s in ("anthropic", "sonnet", "opus", "claude")):
            model_cfg.setdefault("set_cache_control", "default_end")  # as mini-swe-agent's get_model does
        lm = trial_model_class(self.model_base)(model_name=meter.name, **model_cfg)
        lm.meter = meter
        return lm

    def _environment(self, task: Task, sandbox: "Sandbox", trial: "TrialContext", secret: str | None,
                     wall_s: float) -> SandboxEnvironment:
        env_cfg = self.prompt.get("environment") or {}
        cwd = str(env_cfg.get("cwd") or task.workdir)
        env = SandboxEnvironment(
            sandbox, cwd, {**(env_cfg.get("env") or {}), **self.settings.env},
            self.settings.command_timeout_s or float(env_cfg.get("timeout") or DEFAULT_COMMAND_TIMEOUT_S),
            deadline=time.monotonic() + (wall_s or float("inf")),
            log=lambda text: trial.append("agent.log", scrub(text, secret)),
            interpreter=[str(part) for part in env_cfg.get("interpreter") or []],
        )
        env.system_vars = sandbox_system_vars(sandbox, cwd)
        return env


def pydantic_default(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    return dump(mode="json") if callable(dump) else str(value)


def classify(exc: Exception, model: "ModelConfig", secret: str | None) -> TrialError:
    """A failed agent run as its class in the table (core/errors.py), by litellm's exception: endpoint outages
    and rate limits are retried; a refused key or an unknown model is not graded; a refused request is graded
    without a valid reward; a safety refusal and anything else is the agent's, graded."""
    litellm = import_litellm()
    errors = litellm.exceptions
    detail = scrub(" ".join(str(getattr(exc, "message", None) or exc).replace(MINI_KEY_HINT, "").split()), secret)[:500]
    where = f" at {model.base_url}" if model.base_url else ""
    if isinstance(exc, (errors.AuthenticationError, errors.PermissionDeniedError)):
        return AgentAuthenticationError(f"the model endpoint{where} rejected the API key (HTTP 401) for '{model.name}': "
                                        f"{detail}; {key_hint(model)}")
    if isinstance(exc, errors.NotFoundError):
        return ModelNotFoundError(f"the model endpoint{where} does not know '{model.name}' (HTTP 404): {detail}")
    if isinstance(exc, errors.RateLimitError):
        return ApiRateLimitError(f"the model endpoint{where} kept rate-limiting after retries: {detail}")
    outage = (errors.APIConnectionError, errors.Timeout, errors.ServiceUnavailableError,
              errors.InternalServerError, errors.BadGatewayError)
    if isinstance(exc, outage):
        return ApiInternalServerError(f"the model endpoint{where} kept failing after retries: {type(exc).__name__}: {detail}")
    if isinstance(exc, errors.ContentPolicyViolationError):
        return AgentSafetyRefusalError(f"the model refused: {type(exc).__name__}: {detail}")
    if isinstance(exc, (errors.BadRequestError, errors.UnprocessableEntityError, errors.UnsupportedParamsError)):
        return BadRequestError(f"the model endpoint{where} refused a request: {type(exc).__name__}: {detail}")
    return AgentError(f"the agent stopped on {type(exc).__name__}: {detail}")
