"""Config composition: Hydra over the shipped YAML folders and the user's config dirs.

Precedence, lowest to highest: shipped YAML < user config dirs < CLI flags and overrides
< each `--config FILE`. Secrets (the model API key, `--config` values) are applied here,
after Hydra composed the config, so they never reach Hydra's own output or overrides.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from agentcompass.core.catalog import (  # noqa: F401  (re-exported: the config folders)
    GROUPS,
    PLURAL_OF,
    PLURALS,
    check_choice,
    describe,
    group_entries,
    recipe_chain,
    search_roots,
    shipped_root,
)
from agentcompass.core.errors import UserError
from agentcompass.core.merge import deep_merge
from agentcompass.core.provenance import Provenance
from agentcompass.core import secret_values
from agentcompass.core.secret_values import SECRET_KEY, is_secret_key  # noqa: F401  (re-exported)
from agentcompass.core.validation import describe_validation, validate
from agentcompass.core.registry import resolve
from agentcompass.core.schema import (
    EnvConfig,
    HarnessConfig,
    ModelConfig,
    Recipe,
    ResolvedConfig,
    RunConfig,
)

if TYPE_CHECKING:
    from hydra._internal.hydra import Hydra
    from omegaconf import DictConfig

CUSTOM_MODEL = "custom"  # the preset behind any `provider/model` string


@dataclass
class Invocation:
    """What the CLI asked for, before Hydra composes it."""

    overrides: list[str]
    config_files: list[Path] = field(default_factory=list)
    config_dirs: list[Path] = field(default_factory=list)
    model_api_key: str | None = None  # kept out of Hydra: never in its overrides or output
    secret_values: dict[str, str] = field(default_factory=dict)  # KEY=VALUE overrides of secret keys, likewise
    # Overrides whose value holds a secret under an innocent key (an Authorization header, a base URL with a
    # password): kept out of Hydra too, and applied where Hydra would have put them (under --config files).
    hidden_values: dict[str, Any] = field(default_factory=dict)
    typed: dict[str, str] = field(default_factory=dict)  # override (or secret key) -> the flag or text the user typed
    writes_results: bool = True  # False for `config show`: the results dir is not checked

    def roots(self) -> list[Path]:
        return search_roots(self.config_dirs)


def is_secret_override(override: str) -> bool:
    """`model.api_key=...` and the like: applied after composition so Hydra never records them."""
    key = override.partition("=")[0].lstrip("+")
    return "=" in override and is_secret_key(key.rpartition(".")[2])


@functools.cache
def override_parser() -> Any:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create()


def hidden_value(override: str) -> tuple[str, Any] | None:
    """(key, value) of an override whose value is a secret under an innocent key (an `Authorization` header in
    extra_headers, a base URL with a password or `?key=`), to be kept out of Hydra's overrides and output; else None."""
    from hydra.core.override_parser.types import ChoiceSweep

    key = override.partition("=")[0]
    if "://" not in override and "headers" not in key.lower() and not is_secret_key(key.rpartition(".")[2]):
        return None  # cheap: most overrides are neither
    try:
        parsed = override_parser().parse_override(override)
    except Exception:  # Hydra reports a malformed override when it composes
        return None
    key, value = parsed.key_or_group, parsed.value()
    if isinstance(value, ChoiceSweep):
        if any(secret_values.holds_secret(key, item) for item in value.list):
            raise UserError(f"'{key}' holds a secret (a credential in a header or URL): it cannot be swept with -m; "
                            f"run once per value")
        return None
    return (key, value) if secret_values.holds_secret(key, value) else None


def make_hydra(roots: list[Path]) -> "Hydra":
    """A Hydra instance whose search path is exactly our config roots."""
    from hydra._internal.config_search_path_impl import ConfigSearchPathImpl
    from hydra._internal.hydra import Hydra
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.plugins import Plugins
    from hydra.plugins.search_path_plugin import SearchPathPlugin

    search_path = ConfigSearchPathImpl()
    search_path.append("hydra", "pkg://hydra.conf")
    shipped_conf = shipped_root() / "conf"
    for root in roots:
        search_path.append("main" if root == shipped_conf else "agentcompass", f"file://{root}")
    for plugin in Plugins.instance().discover(SearchPathPlugin):
        plugin().manipulate_search_path(search_path)  # launchers and sweepers ship their configs
    search_path.append("schema", "structured://")
    GlobalHydra.instance().clear()  # one process may compose for several commands (validate, tests)
    return Hydra.create_main_hydra2(task_name="agentcompass", config_search_path=search_path)


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


def compose(hydra: "Hydra", overrides: list[str]) -> "DictConfig":
    from hydra.types import RunMode

    try:
        return hydra.compose_config(
            config_name="config", overrides=overrides, run_mode=RunMode.RUN, with_log_configuration=False
        )
    except Exception as exc:  # Hydra and OmegaConf raise many kinds; all mean bad input here
        raise UserError(f"cannot compose the config: {one_line(exc)}") from exc


def load_overlay(path: Path) -> Any:
    from omegaconf import DictConfig, OmegaConf

    if not path.is_file():
        raise UserError(f"--config file '{path}' does not exist; pass a YAML file")
    try:
        overlay = OmegaConf.load(path)
    except Exception as exc:
        raise UserError(f"--config file '{path}' is not valid YAML: {one_line(exc)}") from exc
    if not isinstance(overlay, DictConfig):
        raise UserError(f"--config file '{path}' must hold a mapping of config keys")
    return overlay


UNSET_VARIABLE = re.compile(r"Environment variable '([^']+)' not found")
SECTIONS = ("benchmark", "harness", "model", "env", "run")  # what a run uses, besides environments.<env>


def finalize(cfg: "DictConfig", invocation: Invocation, suffix: str = "") -> ResolvedConfig:
    """Apply --config overlays and secrets, resolve, merge per-provider blocks, validate, check."""
    from omegaconf import OmegaConf

    from agentcompass.core import checks
    choices = dict(cfg.hydra.runtime.choices) if "hydra" in cfg else {}
    overlays = [load_overlay(p) for p in invocation.config_files]
    base = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))  # not struct: overlays may add keys
    for key, value in invocation.hidden_values.items():
        OmegaConf.update(base, key, value, force_add=True)
    try:
        merged = OmegaConf.merge(base, *overlays)
    except Exception as exc:
        raise UserError(f"cannot apply --config: {one_line(exc)}") from exc
    for key, value in invocation.secret_values.items():
        OmegaConf.update(merged, key, value, force_add=True)
    data = resolve_in_use(merged)
    if invocation.model_api_key:
        data["model"]["api_key"] = invocation.model_api_key
    register_secrets(data)

    roots = invocation.roots()
    files = {key: group_entries(key, roots).get(choices.get(GROUPS[key][1], ""), None) for key in GROUPS}
    files["run"] = shipped_root() / "conf" / "config.yaml"
    env_name = data["env"].get("name", "")
    provenance = Provenance(
        typed=[(o.partition("=")[0].lstrip("+~"), label) for o, label in invocation.typed.items()],
        overlays=[(p, OmegaConf.to_container(o, resolve=False)) for p, o in zip(invocation.config_files, overlays)],
        files=files, env_name=env_name, recipe_files=recipe_chain(choices.get(GROUPS["benchmark"][1], ""), roots))
    data["env"] = deep_merge(data["env"], data["environments"].get(env_name) or {})
    bench = data["benchmark"]
    bench = deep_merge(bench, (bench.get("overrides") or {}).get(env_name) or {})
    if files["benchmark"] is not None and not bench.get("base_dir"):
        bench["base_dir"] = str(files["benchmark"].parent)
    data["benchmark"] = bench
    model_choice = choices.get(GROUPS["model"][1], "")
    checks.model_is_set(data["model"], model_choice)
    if invocation.writes_results and str(data["model"].get("base_url") or "").startswith("modal:"):
        from agentcompass.core.registry import load  # a run naming its endpoint (modal:NAME): its live URL

        modal = resolved_section(merged, "environments.modal")  # its credentials, whichever env runs the tasks
        data["model"] = load("service", "named_endpoint")(data["model"], modal if isinstance(modal, dict) else {})
    data["harness"] = with_recipe_defaults(data["harness"], bench, user_set_keys(cfg, overlays) | set(invocation.hidden_values))

    resolved = ResolvedConfig(
        benchmark=validate(Recipe, bench, "benchmark", provenance),
        harness=validate(HarnessConfig, data["harness"], "harness", provenance),
        model=validate(ModelConfig, data["model"], "model", provenance),
        env=validate(EnvConfig, data["env"], "env", provenance),
        run=validate(RunConfig, data["run"], "run", provenance),
    )
    harness_cls = check_impl_settings("harness", resolved.harness, provenance)
    check_impl_settings("provider", resolved.env, provenance)
    checks.benchmark_params(resolved.benchmark, provenance)
    checks.model_settings(resolved.model, provenance, uses_model=getattr(harness_cls, "needs_model", False))
    checks.harness_speaks(harness_cls, resolved.harness.name, resolved.model)
    checks.harness_knows(harness_cls, resolved.harness.name, resolved.model, resolved.settings_of(resolved.harness))
    if invocation.writes_results:
        checks.results_dir(resolved.run.results_dir, provenance)
    model_label = resolved.model.name if model_choice in (CUSTOM_MODEL, "") else model_choice
    resolved.labels = {
        "benchmark": choices.get(GROUPS["benchmark"][1], resolved.benchmark.name),
        "harness": choices.get(GROUPS["harness"][1], resolved.harness.name),
        "model": model_label,
        "model_name": resolved.model.name,  # e.g. predictions' model_name_or_path, as mini-swe-agent writes it
        "env": choices.get(GROUPS["env"][1], resolved.env.name),
        "suffix": suffix,
    }
    return resolved


def resolve_in_use(merged: "DictConfig") -> dict[str, Any]:
    """Plain data of the sections a run uses, interpolations resolved there only: an overlay's
    `${oc.env:MODAL_TOKEN_ID}` under environments.modal does not concern a local run."""
    data: dict[str, Any] = {key: resolved_section(merged, key) for key in SECTIONS}
    for key in SECTIONS:
        if not isinstance(data[key], dict):
            raise UserError(f"config key '{key}' must be a mapping, got {data[key]!r}")
    env_name = str(data["env"].get("name", ""))
    block = resolved_section(merged, f"environments.{env_name}") if env_name else None
    data["environments"] = {env_name: block if isinstance(block, dict) else {}}
    return data


def resolved_section(merged: "DictConfig", key: str) -> Any:
    from omegaconf import DictConfig, OmegaConf

    try:
        node = OmegaConf.select(merged, key, throw_on_missing=False)
        return OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node
    except Exception as exc:  # an unset ${oc.env:VAR}, a bad interpolation
        unset = UNSET_VARIABLE.search(str(exc))
        where = getattr(exc, "full_key", None) or key
        if unset:
            raise UserError(f"cannot resolve the config at '{where}': environment variable {unset[1]} is not set; "
                            f"set it, or write ${{oc.env:{unset[1]},null}} for a value that may be missing") from exc
        raise UserError(f"cannot resolve the config at '{where}': {one_line(exc)}") from exc


def user_set_keys(cfg: "DictConfig", overlays: list[Any]) -> set[str]:
    """Dotted keys the user set: command-line overrides (flags included) and --config files."""
    overrides = list(cfg.hydra.overrides.task) if "hydra" in cfg else []
    keys = {o.partition("=")[0].lstrip("+~") for o in overrides}
    for overlay in overlays:
        keys |= {f"harness.{k}" for k in (overlay.get("harness") or {})}
    return keys


def with_recipe_defaults(harness: dict[str, Any], recipe: dict[str, Any], user_set: set[str]) -> dict[str, Any]:
    """A recipe's `harness_defaults` for the selected harness: over the harness's own YAML, under
    anything the user set (e.g. SWE-bench recipes pick mini_swe_agent's `swebench` prompt config)."""
    defaults = (recipe.get("harness_defaults") or {}).get(harness.get("name")) or {}
    chosen = {k: v for k, v in defaults.items()
              if not any(key == f"harness.{k}" or key.startswith(f"harness.{k}.") for key in user_set)}
    return deep_merge(harness, chosen)


def check_impl_settings(kind: str, block: HarnessConfig | EnvConfig, provenance: Provenance) -> Any:
    """Let the implementation class validate its own keys (its `Settings` model); returns the class."""
    cls = resolve(kind, block.impl or block.name)
    settings_model = own_settings(cls)
    if settings_model is not None:
        settings = block.model_extra if block.model_extra is not None else {}
        for name, alias in aliases_of(settings_model):
            if alias in settings and settings.get(name, None) is None:
                settings.pop(name, None)  # the YAML's null under the canonical name yields to the alias typed
        key, common = ("harness", HarnessConfig) if kind == "harness" else ("env", EnvConfig)
        try:
            settings_model.model_validate(dict(settings))
        except ValidationError as exc:
            raise UserError(describe_validation(exc, settings_model, key, provenance, list(common.model_fields))) from exc
        for name, alias in aliases_of(settings_model):
            if alias in settings:  # one spelling for `config show`, run.json and the provider
                settings[name] = settings.pop(alias)
    return cls


def owner_of(cls: type, name: str) -> type | None:
    return next((c for c in cls.__mro__ if name in c.__dict__), None)


def own_settings(cls: type) -> type[BaseModel] | None:
    """The `Settings` model of the constructor that will take the keys: a user's subclass of a shipped harness
    with an `__init__` of its own (and its own keys) is not held to its parent's settings."""
    settings_owner, init_owner = owner_of(cls, "Settings"), owner_of(cls, "__init__")
    if settings_owner is None or (init_owner is not None and not issubclass(settings_owner, init_owner)):
        return None
    return settings_owner.__dict__["Settings"]


def aliases_of(settings_model: type[BaseModel]) -> list[tuple[str, str]]:
    """(canonical name, alias) of each setting that also takes another spelling (`cpu`, `cpus`)."""
    return [(name, alias) for name, field_info in settings_model.model_fields.items()
            for alias in getattr(field_info.validation_alias, "choices", None) or []
            if isinstance(alias, str) and alias != name]


def register_secrets(data: dict[str, Any]) -> None:
    """Every secret of the sections a run uses, scrubbed by value from here on (agentcompass.core.secret_values):
    the model's key wherever it came from, auth-like extra_headers, URL credentials, env credentials."""
    import os

    secret_values.register_tree(data)
    key_env = (data.get("model") or {}).get("api_key_env")
    if isinstance(key_env, str):
        secret_values.register(os.environ.get(key_env))
    secret_values.register_environment()


def redact(value: Any) -> Any:
    """A copy with every secret masked, by key name, by place (headers, URLs) and by value: run.json, `config show`."""
    return secret_values.public_tree(value)


def public_dict(resolved: ResolvedConfig) -> dict[str, Any]:
    """The resolved config as plain data with secrets redacted."""
    data = resolved.model_dump(mode="json")
    return redact(data)
