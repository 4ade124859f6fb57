"""One model gateway per run, for harnesses whose agent makes its own model calls (installed CLIs).

A harness that declares `uses_gateway = True` finds a `Gateway` in its TrialContext; it asks for
an endpoint per trial and hands the agent that endpoint's base URLs and per-trial token, never the
upstream key. The gateway (a Starlette app under uvicorn, in a background thread of the run) then
(a) sets the preset's upstream model and reasoning tier on every request, whatever the client sent;
(b) meters every call from the upstream's usage into the trial's model_calls.jsonl and totals;
(c) holds the real key. Upstream 5xx and unreachable endpoints reach the client as 5xx and are
counted (`errors_5xx`), so the harness can call an outage infra; a 401 passes through; (d) records the status it
answered each call with (`statuses`): the installed harnesses read the error class from it, never from what the
agent printed (harnesses/installed.py).

Reachability: a local sandbox reaches it on 127.0.0.1 (under bwrap only its port, forwarded into the sandbox's own
network namespace, also for a task without internet, which reaches nothing else); a docker container through its network's
gateway address (a task without internet is moved from `none` onto the run's internal network,
which reaches this host but nothing beyond it); other sandboxes through `run.gateway.public_url`.
"""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import structlog

from agentcompass.core.calls import CALLS_FILE
from agentcompass.core.errors import InfraError, SpendCapReached, UserError
from agentcompass.gateway import gemini
from agentcompass.gateway.app import Upstream, build_app, cleared_fields
from agentcompass.gateway.caps import MAX_IN_FLIGHT, RunSpend, SpendCaps
from agentcompass.gateway.listener import Listener
from agentcompass.gateway.reach import LOOPBACK, WILDCARDS, bind_host, check_caps_priced, network_gateway
from agentcompass.gateway.policy import RequestPolicy, output_limit, tier_extensions

if TYPE_CHECKING:
    from agentcompass.core.models import Meter
    from agentcompass.core.sandbox import Sandbox
    from agentcompass.core.schema import GatewaySettings, ModelConfig, ResolvedConfig
    from agentcompass.core.task import Task
    from agentcompass.core.context import TrialContext

log = structlog.get_logger("agentcompass")
DEFAULT_BASE_URL = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com",
                    "gemini": gemini.DEFAULT_BASE_URL}
REACHES_HOST = ("local", "docker")  # providers whose sandboxes reach this machine without a public URL
SETTLE_TIMEOUT_S = 5.0  # how long a release waits for its trial's calls in flight to be recorded


@dataclass(frozen=True)
class GatewayEndpoint:
    """What one trial's agent is given: base URLs and a token that only this gateway accepts."""

    openai_base_url: str  # e.g. http://HOST:PORT/t/TOKEN/v1 (OpenAI clients append /chat/completions)
    anthropic_base_url: str  # e.g. http://HOST:PORT/t/TOKEN (Anthropic clients append /v1/messages)
    api_key: str = field(repr=False)  # the per-trial token (also accepted as Bearer / x-api-key), never the upstream key
    meter: "TrialMeter" = field(repr=False, compare=False)
    hosted_tools: bool = False  # the task allows internet: the provider's own tools (web search) are forwarded

    @property
    def capped(self) -> threading.Event:
        """Set when a spend cap stopped this trial's calls: the harness stops its agent."""
        return self.meter.capped

    @property
    def gemini_base_url(self) -> str:
        """The root Gemini clients append /v1beta/models/... to (GOOGLE_GEMINI_BASE_URL): the Anthropic one."""
        return self.anthropic_base_url

    def usage(self) -> dict[str, Any]:
        """This trial's calls so far: tokens_in, tokens_out, tokens_cached, tokens_cache_write, calls (answered 2xx),
        generation_s, errors_5xx; and errors (every failed call), cost_usd, cost_known; capped (a spend cap's
        reason, or None), refused (requests the policy did not forward), statuses (each forwarded call's HTTP status
        as the agent got it, in order)."""
        return self.meter.totals()


class TrialMeter:
    """One trial's calls through the gateway, written to its model_calls.jsonl as they end; what its requests may
    carry (policy) and the spend caps it is held to (its own and the run's)."""

    def __init__(self, meter: "Meter", policy: RequestPolicy | None = None, run_spend: RunSpend | None = None,
                 name: str = "") -> None:
        self.meter = meter
        self.name = name  # task and attempt, for the log
        self.policy = policy or RequestPolicy()
        self.run_spend = run_spend or RunSpend(SpendCaps())
        self.errors_5xx = 0
        # The HTTP status of each model call as this gateway answered it, in order: what the harness reads the error
        # class from (never what the agent printed, which its tools can forge). Not the gateway's own refusals.
        self.statuses: list[int] = []
        self.capped = threading.Event()  # set at the first call refused at a cap: the harness stops the agent
        self.cap_reason: str | None = None
        self.refusals: dict[str, int] = {}  # requests the policy refused, by reason (never forwarded, not calls)
        self._lock = threading.Lock()  # totals are read from the harness's thread while calls end
        self._settled = threading.Condition(self._lock)
        self._in_flight: set[int] = set()
        self._next_call = 0

    def over_cap(self) -> str | None:
        """The reason this trial may make no more calls (a cap of its own or the run's), or None."""
        with self._lock:
            if self.cap_reason is None:
                usage = self.meter.usage
                self.cap_reason = (self.run_spend.trial_over(usage.cost_usd, usage.tokens_in + usage.tokens_out)
                                   or self.run_spend.over())
            if self.cap_reason is not None:
                self.capped.set()
            return self.cap_reason

    def refused(self, reason: str) -> None:
        """A request the policy did not forward: counted, and logged the first time each reason comes."""
        with self._lock:
            seen = self.refusals.get(reason, 0)
            self.refusals[reason] = seen + 1
        if not seen:
            log.warning("model gateway refused a request", trial=self.name, reason=reason)

    def begin(self) -> int | None:
        """A call came in: until `end`, the trial's release waits for it to be recorded. None: under a spend cap
        and MAX_IN_FLIGHT calls of this trial are in flight already (the cap would be overshot by all of them)."""
        with self._lock:
            if self.run_spend.caps.any and len(self._in_flight) >= MAX_IN_FLIGHT:
                return None
            self._next_call += 1
            self._in_flight.add(self._next_call)
            return self._next_call

    def end(self, call: int) -> None:
        with self._lock:
            self._in_flight.discard(call)
            self._settled.notify_all()

    def settle(self, timeout: float) -> bool:
        """Wait until every call in flight is recorded: a client that died with its sandbox has its stream cut
        by the gateway a moment later, and that record belongs in this try's files before they are moved."""
        with self._lock:
            return self._settled.wait_for(lambda: not self._in_flight, timeout)

    def record(self, seconds: float, status: int, tokens: tuple[int, int, int, int] | None) -> None:
        ok = 200 <= status < 300
        with self._lock:
            self.statuses.append(status)
            before = self.meter.usage.cost_usd
            self.meter.waited(seconds, failed=not ok)
            if ok:
                tokens_in, tokens_out, cached, written = tokens or (0, 0, 0, 0)
                self.meter.count(tokens_in, tokens_out, cached, cache_write=written)
                self.run_spend.add(self.meter.usage.cost_usd - before, tokens_in + tokens_out)
                return
            self.meter.failed()
            self.errors_5xx += status >= 500

    def totals(self) -> dict[str, Any]:
        with self._lock:
            usage = self.meter.usage
            return {"tokens_in": usage.tokens_in, "tokens_out": usage.tokens_out, "tokens_cached": usage.tokens_cached,
                    "tokens_cache_write": usage.tokens_cache_write,
                    "calls": usage.model_calls, "generation_s": round(usage.generation_s, 6),
                    "errors_5xx": self.errors_5xx, "errors": usage.model_errors, "cost_usd": usage.cost_usd,
                    "cost_known": usage.cost_known, "capped": self.cap_reason, "refused": sum(self.refusals.values()),
                    "statuses": list(self.statuses)}


def upstream_of(model: "ModelConfig") -> Upstream:
    """The endpoint a preset names, as the gateway forwards to it; UserError when it cannot."""
    from agentcompass.core.models import api_key, gemini_root, litellm_name, request_fields

    routed = litellm_name(model)
    prefix, _, name = routed.partition("/")
    shape = prefix if prefix in DEFAULT_BASE_URL else model.api if model.base_url else None
    if shape not in DEFAULT_BASE_URL:
        raise UserError(f"the model gateway forwards to OpenAI-, Anthropic- or Gemini-compatible endpoints; model "
                        f"'{model.name}' is routed to '{prefix}'; set model.api (openai | anthropic | gemini) and "
                        "--model-base-url")
    if shape in ("anthropic", "gemini") and model.reasoning and not model.reasoning_map:
        raise UserError(f"model '{model.name}' has tier '{model.reasoning}' but no reasoning_map, and the {shape} API "
                        "has no reasoning_effort to send it as; give the preset a reasoning_map (see claude-sonnet-4-5)")
    base = (model.base_url or DEFAULT_BASE_URL[shape]).rstrip("/")
    if shape == "anthropic":  # the root: clients and litellm name it with or without /v1(/messages)
        base = base.removesuffix("/messages").removesuffix("/v1")
    if shape == "gemini":
        base = gemini_root(base)
    tier = request_fields(model)
    extra = tuple((str(k), str(v)) for k, v in (model.params.get("extra_headers") or {}).items())
    return Upstream(shape, base, name, api_key(model), tier, cleared_fields(model.reasoning_map, tier),
                    model.connect_timeout_s, model.request_timeout_s, extra)


def check_gateway(resolved: "ResolvedConfig", tasks: list["Task"], provider: Any) -> None:
    """Before the run: the model can be forwarded to and every sandbox of this env can reach the gateway."""
    upstream_of(resolved.model)
    check_caps_priced(resolved)
    env = resolved.env.impl or resolved.env.name
    if env == "local" and getattr(provider, "isolation", None) == "bwrap":  # its port reaches the sandbox through pasta
        from agentcompass.providers.local.network import has_user_networking

        if not has_user_networking():
            raise UserError(f"harness '{resolved.harness.name}' reaches the model gateway from a bubblewrap sandbox "
                            "through user-mode networking (pasta, Debian package passt): apt-get install passt, "
                            "or run with --env docker")
    public_url = resolved.run.gateway.public_url
    if public_url:
        if not public_url.startswith(("http://", "https://")):
            raise UserError(f"run.gateway.public_url {public_url!r} is not an http(s) URL; pass the URL that "
                            "forwards to the gateway's port (run.gateway.port), e.g. https://my-tunnel.example")
        return
    fix = ("set run.gateway.public_url to a URL that reaches this machine's run.gateway.port (a tunnel), "
           "or run with --env docker or --env local")
    if env not in REACHES_HOST:
        raise UserError(f"harness '{resolved.harness.name}' sends its model calls through agentcompass's gateway on "
                        f"this machine, which a sandbox of env '{env}' cannot reach; {fix}")
    if env == "docker":
        from agentcompass.providers.docker.provider import docker_host

        if not docker_host().startswith("unix://"):
            raise UserError(f"the Docker engine at {docker_host()} runs on another machine, whose containers cannot "
                            f"reach the model gateway here; {fix}")


class Gateway:
    """The run's gateway: started before the first trial, stopped when the run ends (Ctrl-C included)."""

    def __init__(self, model: "ModelConfig", run_name: str, settings: "GatewaySettings", host: str | None = None,
                 caps: SpendCaps | None = None) -> None:
        self.model = model
        self.run_name = run_name
        self.settings = settings
        self.host = host or LOOPBACK  # listened on from the start; a sandbox's address to this host is added on first use
        self.upstream = upstream_of(model)
        self.output_limit = output_limit(model)
        self.extensions = tier_extensions(model.reasoning_map, self.upstream.tier)
        self.spend = RunSpend(caps or SpendCaps())
        self.port = 0
        self._trials: dict[str, TrialMeter] = {}
        self._lock = threading.Lock()
        self._listen_lock = threading.Lock()  # starting a listener takes a moment: calls in flight must not wait on it
        self._listeners: dict[str, Listener] = {}
        self._networks: list[tuple[Any, str]] = []  # docker networks it created: (engine API, name)

    @classmethod
    def for_run(cls, resolved: "ResolvedConfig") -> "Gateway":
        return cls(resolved.model, str(resolved.run.run_name), resolved.run.gateway, bind_host(resolved),
                   SpendCaps.of(resolved.run))

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> "Gateway":
        self.port = self._listen(self.host)
        log.info("model gateway started", host=self.host, port=self.port, upstream=self.upstream.base_url)
        return self

    def _listen(self, address: str) -> int:
        """Listen on `address` too (the run's port there when it is free); returns the port it has there."""
        with self._listen_lock:
            with self._lock:
                known = self._listeners.get(address)
                if known is not None:
                    return known.port
            try:
                listener = Listener(build_app(self.upstream, self.trial), address, self.port or self.settings.port)
            except UserError:
                if not self.port or self.settings.port:
                    raise
                listener = Listener(build_app(self.upstream, self.trial), address, 0)  # the run's port is taken there
            with self._lock:
                self._listeners[address] = listener
            if self.port:
                log.info("model gateway listens on one more address", host=address, port=listener.port)
            return listener.port

    @property
    def addresses(self) -> list[str]:
        """Where it listens now."""
        with self._lock:
            return sorted(self._listeners)

    def stop(self) -> None:
        """End the servers (streams in flight get two seconds) and remove the networks it made. Idempotent."""
        with self._lock:
            listeners = list(self._listeners.values())
            self._listeners.clear()
        for listener in listeners:
            listener.stop()
        for api, name in self._networks:
            try:
                api.remove_network(name)
            except Exception as exc:  # a kept container still on it: `agentcompass cleanup` removes it later
                log.warning("could not remove the gateway's network", network=name, error=str(exc))
        self._networks.clear()

    def __enter__(self) -> "Gateway":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        with self._lock:
            return any(listener.running for listener in self._listeners.values())

    # -- trials ----------------------------------------------------------------------------
    def trial(self, token: str) -> TrialMeter | None:
        with self._lock:
            return self._trials.get(token) if token else None

    def endpoint(self, trial: "TrialContext", sandbox: "Sandbox") -> GatewayEndpoint:
        """Register the trial (its calls go to its model_calls.jsonl) and return what its agent is given,
        with a host that `sandbox` can reach. SpendCapReached when the run's cap is already reached."""
        from agentcompass.core.models import Meter

        over = self.spend.over()
        if over is not None:
            raise SpendCapReached(f"{over}; this attempt was not started")
        if self.settings.public_url:
            base = self.settings.public_url.rstrip("/")
        else:
            host = self._host_for(sandbox)
            port = self.port if self.host in WILDCARDS else self._listen(host)
            base = f"http://{host}:{port}"
        token = f"acg-{secrets.token_urlsafe(24)}"
        internet = bool(getattr(getattr(getattr(sandbox, "inner", sandbox), "spec", None), "allow_internet", False))
        policy = RequestPolicy(self.output_limit, hosted_tools=internet, extensions=self.extensions)
        meter = TrialMeter(Meter(self.model, trial.dir / CALLS_FILE), policy, self.spend,
                           f"{trial.task_id} attempt {trial.attempt}")
        with self._lock:
            self._trials[token] = meter
        root = f"{base}/t/{token}"
        return GatewayEndpoint(f"{root}/v1", root, token, meter, hosted_tools=internet)

    def release(self, endpoint: GatewayEndpoint) -> None:
        """The trial is over: its token is refused from now on (its totals stay readable), and the calls still
        in flight (a client killed with its sandbox) are recorded before the harness reads the totals."""
        with self._lock:
            self._trials.pop(endpoint.api_key, None)
        if not endpoint.meter.settle(SETTLE_TIMEOUT_S):
            log.warning("model calls of a released trial still in flight; they are recorded when they end",
                        waited_s=SETTLE_TIMEOUT_S)

    # -- reachability ------------------------------------------------------------------------
    def _host_for(self, sandbox: "Sandbox") -> str:
        from agentcompass.providers.docker.sandbox import DockerSandbox
        from agentcompass.providers.local.provider import LocalSandbox

        inner = getattr(sandbox, "inner", sandbox)  # the trial's TimedSandbox wraps the provider's
        exposed = getattr(inner, "host_address", None)  # a sandbox that knows where it reaches this host says so
        if callable(exposed) and (address := exposed()):
            return str(address)
        if isinstance(inner, LocalSandbox):
            # bwrap's network namespace reaches this one port of the host's loopback, with or without internet (without,
            # pasta configures no interface: the forwarded port on the sandbox's loopback is all the network it has)
            inner.forward_host_port(self.port)
            return LOOPBACK if self.host in (*WILDCARDS, "localhost") else self.host
        if isinstance(inner, DockerSandbox):
            return self._docker_host_for(inner)
        raise UserError(f"a {type(inner).__name__} cannot reach the model gateway on this machine; set "
                        "run.gateway.public_url to a URL that reaches its port (run.gateway.port)")

    def _docker_host_for(self, sandbox: Any) -> str:
        """The address of this host on the container's network; a container on `none` (a task without
        internet) is moved onto the run's internal network first, which reaches this host only."""
        import docker

        api = sandbox.api
        info = api.inspect_container(sandbox.id)
        mode = info["HostConfig"].get("NetworkMode") or ""
        if mode == "host":
            return "127.0.0.1"
        if mode.startswith("container:"):  # a compose client sharing a service's network
            info = api.inspect_container(mode.partition(":")[2])
        attached = info["NetworkSettings"].get("Networks") or {}
        networks = [name for name in attached if name != "none"]
        try:
            if not networks:  # on `none`, or on nothing (a phase without network left its network)
                networks = [self._internal_network(api)]
                if "none" in attached:
                    api.disconnect_container_from_network(sandbox.id, "none")
                api.connect_container_to_network(sandbox.id, networks[0])
                attached = api.inspect_container(sandbox.id)["NetworkSettings"].get("Networks") or {}
            gateway_ip = network_gateway(attached.get(networks[0]) or {}, lambda: api.inspect_network(networks[0]))
        except docker.errors.APIError as exc:
            raise InfraError(f"cannot give container {sandbox.spec.name} a network to the model gateway: "
                             f"{exc.explanation or exc}") from exc
        if gateway_ip is None:
            raise InfraError(f"network {networks[0]} of container {sandbox.spec.name} has no IPv4 gateway address "
                             "to reach the model gateway at (neither on the container's endpoint nor in the network's IPAM)")
        return gateway_ip

    def _internal_network(self, api: Any) -> str:
        """The run's internal bridge network (no route out), created on first use, removed at stop."""
        from agentcompass.providers.docker.run_network import ICC_OFF, create_shared_network
        from agentcompass.providers.remote import OWNER_LABEL, process_owner

        safe = "".join(c if c.isalnum() or c in "_.-" else "-" for c in self.run_name)[:40]
        name = f"ac-gateway-{safe}-{self.port}"
        with self._lock:
            if not any(known == name for _, known in self._networks):
                # Owned by this process: a run killed before its stop leaves it, and the next run reaps it (run_network).
                labels = {"agentcompass": "1", "run": self.run_name, OWNER_LABEL: process_owner("gateway")}
                create_shared_network(api, name, labels, internal=True, options=ICC_OFF)  # trials never reach each other
                self._networks.append((api, name))
        return name


__all__ = ["Gateway", "GatewayEndpoint", "TrialMeter", "bind_host", "check_gateway",
           "network_gateway", "upstream_of"]
