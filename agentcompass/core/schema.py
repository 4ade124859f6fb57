"""Schemas for each config group; a typo in any YAML key fails naming the file and the key."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationInfo, field_validator, model_validator


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# Timeouts, sizes and limits in settings: zero or a negative number is a typo, caught before the run.
Positive = Annotated[float, Field(gt=0)]
PositiveInt = Annotated[int, Field(gt=0)]


class Timeouts(Strict):
    agent: float | None = Field(None, gt=0)
    verify: float | None = Field(None, gt=0)
    build: float | None = Field(None, gt=0)


class Resources(Strict):
    cpus: float | None = Field(None, gt=0)
    memory_mb: int | None = Field(None, gt=0)


class Recipe(Strict):
    name: str
    description: str = ""
    format: str
    source: dict[str, Any] = Field(default_factory=dict)
    image: str | None = None  # template, e.g. "swebench/sweb.eval.x86_64.{instance_id_1776}:latest"
    workdir: str | None = None
    instruction_template: str | None = None
    runs_on_host: bool = False  # tasks need only host tools: the local provider may run them
    timeouts: Timeouts = Field(default_factory=Timeouts)
    resources: Resources = Field(default_factory=Resources)
    allow_internet: bool | None = None
    env: dict[str, str] = Field(default_factory=dict)
    build_args: dict[str, str] = Field(default_factory=dict)  # ARGs of the tasks' Dockerfiles, e.g. BASE_IMAGE
    params: dict[str, Any] = Field(default_factory=dict)
    overrides: dict[str, dict[str, Any]] = Field(default_factory=dict)  # per provider name
    harness_defaults: dict[str, dict[str, Any]] = Field(default_factory=dict)  # harness name -> its settings here
    base_dir: str | None = None  # where the recipe file lives: relative source paths start here
    # How errors count in the rates, as the benchmark's official harness counts them (agentcompass.core.scoring.RULES).
    scoring: Literal["errors_fail", "every_attempt", "valid_reward"] = "errors_fail"


class Pricing(Strict):
    # How the report bills the model: by the hour of its own endpoint (split by concurrency) or per
    # token. Unset: self_hosted when hourly_usd is given, else per_token (never guessed from base_url).
    billing: Literal["self_hosted", "per_token", "reported"] | None = None  # reported: the harness's own cost
    input_per_mtok: float | None = None
    output_per_mtok: float | None = None
    cached_per_mtok: float | None = None  # cache reads; default: the input price
    cache_write_per_mtok: float | None = None  # cache writes (Anthropic's cache_creation_input_tokens); default: input
    hourly_usd: float | None = None  # self-hosted endpoints are priced by the hour
    modal_app: str | None = None  # `agentcompass report --bill modal`: the endpoint's Modal app
    modal_tags: dict[str, str] = Field(default_factory=dict)  # ... or the tags its billing rows carry


class ModalEndpoint(Strict):
    """A Modal Endpoint serving the model (`agentcompass endpoint up PRESET --env modal`): Modal picks the GPUs for
    the model; `hardware` only says which, for people reading the preset (the rate is pricing.hourly_usd)."""

    name: str = Field(pattern=r"^[a-z0-9]([a-z0-9-]{0,62}[a-z0-9])?$")  # found again by this name: `up` is idempotent
    model: str  # the base model's Hugging Face repo id, e.g. zai-org/GLM-5.2-FP8
    volume: str | None = None  # a Modal Volume already holding the weights: reused, never downloaded again
    volume_path: str | None = None  # where in the volume the weights are
    environment: str | None = None  # Modal environment; default: the credentials' own
    min_containers: int | None = Field(None, ge=0)
    max_containers: int | None = Field(None, ge=1)
    scaledown_window_s: int | None = Field(None, ge=2, le=3600)
    unauthenticated: bool = False  # default: requests need a Modal proxy token (Modal-Key / Modal-Secret headers)
    hardware: str | None = None  # e.g. "8xB200", informational

    @model_validator(mode="after")
    def _volume_with_its_path(self) -> "ModalEndpoint":
        if bool(self.volume) != bool(self.volume_path):
            raise ValueError("endpoint.modal.volume and volume_path go together: name both or neither")
        return self


class EndpointConfig(Strict):
    modal: ModalEndpoint | None = None


class ModelConfig(Strict):
    name: str
    description: str = ""
    api: str = "openai"  # protocol spoken by the endpoint
    base_url: str | None = None
    api_key: SecretStr | None = None
    api_key_env: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    reasoning: str | None = None  # a tier name: a key of reasoning_map, else sent as reasoning_effort
    reasoning_map: dict[str, dict[str, Any]] = Field(default_factory=dict)  # tier -> request fields
    pricing: Pricing | None = None
    connect_timeout_s: float = Field(10.0, gt=0)  # a call that cannot connect within this fails (then retried)
    request_timeout_s: float = Field(600.0, gt=0)  # a whole request, generation included (litellm's default)
    # The most output tokens one call may ask for through the gateway (larger asks are lowered to it);
    # None: litellm's figure for the model, else agentcompass.gateway.policy.DEFAULT_MAX_OUTPUT_TOKENS.
    max_output_tokens: int | None = Field(None, ge=1)
    endpoint: EndpointConfig | None = None  # how `agentcompass endpoint up` serves this model itself

    @field_validator("name", "base_url")
    @classmethod
    def _is_set(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value == "???":  # OmegaConf's mark for a value the preset leaves to the user
            raise ValueError(f"model.{info.field_name} is not set; pass model.{info.field_name}=VALUE"
                             + (" or --model-base-url URL" if info.field_name == "base_url" else ""))
        return value

    @field_validator("reasoning_map")
    @classmethod
    def _tier_is_known(cls, value: dict[str, dict[str, Any]], info: ValidationInfo) -> dict[str, dict[str, Any]]:
        # Checked on the map (validated after `reasoning`) so the error echoes the map, never the API key.
        tier = info.data.get("reasoning")
        if tier is not None and value and tier not in value:
            raise ValueError(f"model.reasoning '{tier}' is not one of this model's tiers ({', '.join(value)}); "
                             f"pass model.reasoning=TIER")
        return value


class HarnessConfig(BaseModel):
    """Common harness keys; the rest are the harness's own settings, checked by its class."""

    model_config = ConfigDict(extra="allow")
    name: str
    description: str = ""
    impl: str | None = None
    needs_model: bool = False


class EnvConfig(BaseModel):
    """Common provider keys; the rest are the provider's own settings, checked by its class."""

    model_config = ConfigDict(extra="allow")
    name: str
    description: str = ""
    impl: str | None = None


class GatewaySettings(Strict):
    """The run's model gateway (agentcompass.gateway.server), for harnesses that send their model calls through it."""

    host: str | None = None  # address it listens on; None: only where the run's sandboxes reach it (docs/gateway.md)
    port: int = Field(0, ge=0, le=65535)  # 0: any free port
    public_url: str | None = None  # how sandboxes reach it when they cannot on their own (modal, gcp, a remote engine)


SPEND_CAPS = ("max_cost_usd", "max_tokens", "max_trial_cost_usd", "max_trial_tokens")  # RunConfig's, at the gateway


class RunConfig(Strict):
    k: int = Field(1, ge=1)
    task_concurrency: int = Field(4, ge=1)
    max_retries: int = Field(2, ge=0)
    retry_backoff_s: float = Field(2.0, ge=0)
    results_dir: str = "results"
    run_name: str | None = None
    keep_environment: bool = False
    retry_errors: bool = False  # on resume, rerun the attempts recorded as errors
    new_run: bool = False  # settings differ from the run's: start `<run_name>-N` beside it instead of refusing
    # None: the recipe's scoring rule; true: every error is a failed attempt; false: no error is a verdict
    count_errors_as_failures: bool | None = None
    model_check: bool = True  # one 1-token request before the first trial (--no-model-check skips it)
    provider_limit: int | None = Field(None, ge=1)  # sandboxes of the env open at once; default: the provider's
    env_open_qps: float | None = Field(None, gt=0)  # sandbox creations a second; default: the provider's
    sweep_parallel: bool = False  # a -m sweep runs every job at once in one pool (--sweep-parallel)
    processes: int | None = Field(None, ge=1)  # worker processes for the trials; None: one per core past 128 at once
    gateway: GatewaySettings = Field(default_factory=GatewaySettings)
    # A shared sandbox's final filesystem (its changes since the image) kept for `regrade` up to this size; 0: none
    kept_state_cap_mb: float = Field(200.0, ge=0)
    # Spend caps, enforced at the model gateway (docs/gateway.md): reached, further calls are refused and the
    # attempt fails with the reason. Tokens are input (cache reads and writes included) plus output.
    max_cost_usd: float | None = Field(None, gt=0)  # the whole run's model spend
    max_tokens: int | None = Field(None, ge=1)  # the whole run's tokens
    max_trial_cost_usd: float | None = Field(None, gt=0)  # one attempt's model spend
    max_trial_tokens: int | None = Field(None, ge=1)  # one attempt's tokens
    # Harbor's timeout multipliers and caps (core/limits.py): a phase's limit is min(base, cap) x its multiplier,
    # the phase's own when set, else timeout_multiplier.
    timeout_multiplier: float = Field(1.0, gt=0)
    agent_timeout_multiplier: float | None = Field(None, gt=0)
    verifier_timeout_multiplier: float | None = Field(None, gt=0)
    agent_setup_timeout_multiplier: float | None = Field(None, gt=0)
    environment_build_timeout_multiplier: float | None = Field(None, gt=0)
    agent_max_timeout_sec: float | None = Field(None, gt=0)  # Harbor's agent max_timeout_sec
    verifier_max_timeout_sec: float | None = Field(None, gt=0)  # Harbor's verifier max_timeout_sec


class ResolvedConfig(Strict):
    """One fully composed, validated run: what run.json records (secrets redacted)."""

    benchmark: Recipe
    harness: HarnessConfig
    model: ModelConfig
    env: EnvConfig
    run: RunConfig
    labels: dict[str, str] = Field(default_factory=dict)  # names used for the run directory

    def settings_of(self, block: BaseModel) -> dict[str, Any]:
        """The implementation-specific keys of a harness or env block."""
        return dict(block.model_extra or {})
