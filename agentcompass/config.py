"""Config composition: Hydra over the shipped YAML folders and the user's config dirs.

Precedence, lowest to highest: shipped YAML < user config dirs < CLI flags and overrides
< each `--config FILE`. Secrets (the model API key, `--config` values) are applied here,
after Hydra composed the config, so they never reach Hydra's own output or overrides.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from agentcompass.errors import UserError
from agentcompass.registry import closest, resolve
from agentcompass.schema import (
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

PACKAGE_DIR = Path(__file__).resolve().parent

# config key -> (folder name in a config root, Hydra group@package, noun used in messages)
GROUPS: dict[str, tuple[str, str]] = {
    "benchmark": ("recipes", "recipes@benchmark"),
    "harness": ("harnesses", "harnesses@harness"),
    "model": ("models", "models@model"),
    "env": ("providers", "providers@env"),
}
PLURALS = {"benchmarks": "benchmark", "harnesses": "harness", "models": "model", "envs": "env"}
PLURAL_OF = {key: plural for plural, key in PLURALS.items()}
CUSTOM_MODEL = "custom"  # the preset behind any `provider/model` string
SECRET_KEY = re.compile(r"(^|_)(api_?key|token|secret|password|credentials?)(_|$)", re.IGNORECASE)


def shipped_root() -> Path:
    """The YAML folders: bundled inside the wheel, or the repository root in a checkout."""
    bundled = PACKAGE_DIR / "_config"
    return bundled if bundled.is_dir() else PACKAGE_DIR.parent


def search_roots(config_dirs: list[Path]) -> list[Path]:
    """Config roots, first match wins: later --config-dir first, then AGENTCOMPASS_CONFIG_PATH."""
    env_dirs = [Path(p) for p in os.environ.get("AGENTCOMPASS_CONFIG_PATH", "").split(os.pathsep) if p]
    for d in [*config_dirs, *env_dirs]:
        if not d.is_dir():
            raise UserError(f"config dir '{d}' does not exist; pass an existing directory with --config-dir or AGENTCOMPASS_CONFIG_PATH")
    root = shipped_root()
    return [*(d.resolve() for d in reversed(config_dirs)), *(d.resolve() for d in env_dirs), root / "conf", root]


def group_entries(key: str, roots: list[Path]) -> dict[str, Path]:
    """Every option of a group, name -> file, the first root that has a name winning."""
    folder = GROUPS[key][0]
    found: dict[str, Path] = {}
    for root in roots:
        for path in sorted((root / folder).glob("*.yaml")):
            found.setdefault(path.stem, path)
    return found


def describe(path: Path) -> str:
    """The `description:` line of a YAML file, read without a YAML parser (fast `list`)."""
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("description:"):
            return line.partition(":")[2].strip().strip("'\"")
    return ""


def check_choice(key: str, name: str, roots: list[Path]) -> None:
    options = group_entries(key, roots)
    if name not in options:
        choices = sorted(options)
        raise UserError(
            f"unknown {key} '{name}'; available {PLURAL_OF[key]}: {', '.join(choices)}{closest(name, choices)}; "
            f"see `agentcompass list {PLURAL_OF[key]}`"
        )


@dataclass
class Invocation:
    """What the CLI asked for, before Hydra composes it."""

    overrides: list[str]
    config_files: list[Path] = field(default_factory=list)
    config_dirs: list[Path] = field(default_factory=list)
    model_api_key: str | None = None  # kept out of Hydra: never in its overrides or output
    secret_values: dict[str, str] = field(default_factory=dict)  # KEY=VALUE overrides of secret keys, likewise

    def roots(self) -> list[Path]:
        return search_roots(self.config_dirs)


def is_secret_override(override: str) -> bool:
    """`model.api_key=...` and the like: applied after composition so Hydra never records them."""
    key = override.partition("=")[0].lstrip("+")
    return "=" in override and bool(SECRET_KEY.search(key.rpartition(".")[2]))


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


def deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


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


def finalize(cfg: "DictConfig", invocation: Invocation, suffix: str = "") -> ResolvedConfig:
    """Apply --config overlays and secrets, resolve, merge per-provider blocks, validate."""
    from omegaconf import OmegaConf

    choices = dict(cfg.hydra.runtime.choices) if "hydra" in cfg else {}
    overlays = [load_overlay(p) for p in invocation.config_files]
    base = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))  # not struct: overlays may add keys
    try:
        merged = OmegaConf.merge(base, *overlays)
    except Exception as exc:
        raise UserError(f"cannot apply --config: {one_line(exc)}") from exc
    for key, value in invocation.secret_values.items():
        OmegaConf.update(merged, key, value, force_add=True)
    if "hydra" in merged:
        merged = OmegaConf.masked_copy(merged, [k for k in merged if k != "hydra"])
    try:
        data: dict[str, Any] = OmegaConf.to_container(merged, resolve=True)  # type: ignore[assignment]
    except Exception as exc:
        raise UserError(f"cannot resolve the config: {one_line(exc)}") from exc
    for key in ("benchmark", "harness", "model", "env", "run"):
        if not isinstance(data.get(key), dict):
            raise UserError(f"config key '{key}' must be a mapping, got {data.get(key)!r}")
    if invocation.model_api_key:
        data["model"]["api_key"] = invocation.model_api_key

    roots = invocation.roots()
    files = {key: group_entries(key, roots).get(choices.get(GROUPS[key][1], ""), None) for key in GROUPS}
    env_name = data["env"].get("name", "")
    env_block = (data.get("environments") or {}).get(env_name) or {}
    data["env"] = deep_merge(data["env"], env_block)
    bench = data["benchmark"]
    bench = deep_merge(bench, (bench.get("overrides") or {}).get(env_name) or {})
    if files["benchmark"] is not None and not bench.get("base_dir"):
        bench["base_dir"] = str(files["benchmark"].parent)
    data["benchmark"] = bench
    data["harness"] = with_recipe_defaults(data["harness"], bench, user_set_keys(cfg, overlays))

    resolved = ResolvedConfig(
        benchmark=validate(Recipe, bench, "benchmark", files["benchmark"]),
        harness=validate(HarnessConfig, data["harness"], "harness", files["harness"]),
        model=validate(ModelConfig, data["model"], "model", files["model"]),
        env=validate(EnvConfig, data["env"], "env", files["env"]),
        run=validate(RunConfig, data["run"], "run", None),
    )
    check_impl_settings("harness", resolved.harness, files["harness"])
    check_impl_settings("provider", resolved.env, files["env"])
    model_choice = choices.get(GROUPS["model"][1], resolved.model.name)
    model_label = resolved.model.name if model_choice == CUSTOM_MODEL else model_choice
    resolved.labels = {
        "benchmark": choices.get(GROUPS["benchmark"][1], resolved.benchmark.name),
        "harness": choices.get(GROUPS["harness"][1], resolved.harness.name),
        "model": model_label,
        "model_name": resolved.model.name,  # e.g. predictions' model_name_or_path, as mini-swe-agent writes it
        "env": choices.get(GROUPS["env"][1], resolved.env.name),
        "suffix": suffix,
    }
    return resolved


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


def validate(schema: type[BaseModel], data: dict[str, Any], key: str, path: Path | None) -> Any:
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        raise UserError(describe_validation(exc, schema, key, path)) from exc


def describe_validation(exc: ValidationError, schema: type[BaseModel], key: str, path: Path | None) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in (key, *err["loc"]))
    origin = f" (from {path})" if path else ""
    if err["type"] == "extra_forbidden":
        allowed = ", ".join(schema.model_fields) if len(err["loc"]) == 1 else "see the docs"
        return f"unknown key '{where}'{origin}; allowed keys: {allowed}"
    if err["type"] == "missing":
        return f"missing key '{where}'{origin}; add it to the YAML or pass {where}=VALUE"
    return f"invalid value for '{where}'{origin}: {err['msg']} (got {err.get('input')!r})"


def check_impl_settings(kind: str, block: HarnessConfig | EnvConfig, path: Path | None) -> None:
    """Let the implementation class validate its own keys (its `Settings` model)."""
    cls = resolve(kind, block.impl or block.name)
    settings_model = getattr(cls, "Settings", None)
    if settings_model is not None:
        validate(settings_model, dict(block.model_extra or {}), "harness" if kind == "harness" else "env", path)


def redact(value: Any) -> Any:
    """A copy with every secret-looking key's value replaced, for run.json and `config show`."""
    if isinstance(value, dict):
        return {
            k: ("***" if SECRET_KEY.search(str(k)) and v not in (None, "") else redact(v)) for k, v in value.items()
        }
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value


def public_dict(resolved: ResolvedConfig) -> dict[str, Any]:
    """The resolved config as plain data with secrets redacted."""
    data = resolved.model_dump(mode="json")
    return redact(data)
