"""The modal env's settings (`environments.modal`, --env-params): one model, read by the provider that
opens the sandboxes and by each sandbox that runs commands in one."""

from __future__ import annotations

from pydantic import AliasChoices, Field, SecretStr, model_validator

from agentcompass.core.sandbox import DEFAULT_OUTPUT_CAP
from agentcompass.core.schema import Positive, PositiveInt, Strict

MAX_LIFETIME_S = 24 * 3600  # Modal's own ceiling for a sandbox's timeout


class ModalSettings(Strict):
    """The names of the Modal docs' parameter table; the older spellings are accepted as aliases (listed
    first: the shipped YAML sets the canonical name to null, so an alias present is what the user typed)."""

    app_name: str = "agentcompass"  # the Modal app the sandboxes belong to (created when missing)
    environment_name: str | None = None  # Modal environment; default: the profile's
    image: str | None = None  # run-wide registry image for every task, instead of the task's own
    named_image: str | None = None  # a published Modal image, looked up by name (Image.from_name)
    add_python: str | None = None  # e.g. "3.11": let Modal add Python to an image without it
    # cpu (Modal cores: 1 core = 2 vCPUs) and memory (MiB) override the task's; both are passed as
    # (request, limit), like docker's caps. Without it, the task's cpus (vCPUs) are converted to cores.
    cpu: Positive | None = Field(None, validation_alias=AliasChoices("cpus", "cpu"))
    memory: PositiveInt | None = Field(None, validation_alias=AliasChoices("memory_mb", "memory"))
    gpu: str | None = None  # e.g. "A10G" or "H100:2"
    region: str | None = None
    timeout: PositiveInt | None = Field(None, validation_alias=AliasChoices("timeout_s", "timeout"))
    idle_timeout: PositiveInt | None = Field(None, validation_alias=AliasChoices("idle_timeout_s", "idle_timeout"))
    env_variables: dict[str, str] = Field(default_factory=dict)  # non-secret variables for every sandbox
    block_network: bool | None = None  # default: blocked when the task disallows internet
    token_id: SecretStr | None = None
    token_secret: SecretStr | None = None
    shell: str = "bash"  # runs every exec'd command: SHELL -c CMD
    output_cap_bytes: PositiveInt = DEFAULT_OUTPUT_CAP
    ready_timeout: PositiveInt = 600  # how long a new sandbox may take to be scheduled and start

    @model_validator(mode="after")
    def _one_image(self) -> "ModalSettings":
        if self.image and self.named_image:
            raise ValueError("set image (a registry image) or named_image (a Modal image), not both")
        return self
