"""Checks of a composed config that its schemas cannot make alone, all before anything is written.

Each failure is one line naming the key, where its value came from and what to do.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from agentcompass.core.errors import UserError
from agentcompass.core.provenance import Provenance, Source
from agentcompass.core.registry import check_extra, resolve
from agentcompass.core.schema import ModelConfig, Recipe
from agentcompass.core.validation import validate

UNSET = "???"  # OmegaConf's mark for a value a preset leaves to the user
HOW_TO_SET = {"name": "model.name=NAME", "base_url": "--model-base-url URL"}


def model_is_set(model: dict[str, Any], preset: str) -> None:
    """A preset such as openai_compatible leaves name and base_url to the user: name every one missing."""
    unset = [key for key in HOW_TO_SET if model.get(key) == UNSET]
    if unset:
        raise UserError(f"model '{preset or model.get('name')}': {', '.join(f'model.{k} is not set' for k in unset)}; "
                        f"pass {' and '.join(HOW_TO_SET[k] for k in unset)} (or set them in a --config file)")


def model_settings(model: ModelConfig, provenance: Provenance, uses_model: bool) -> None:
    if model.base_url is not None and not model.base_url.startswith(("http://", "https://")):
        raise UserError(f"invalid value for 'model.base_url'{provenance.describe('model.base_url')}: "
                        f"expected an http:// or https:// URL, got {model.base_url!r}")
    if uses_model and model.name != "none":
        from agentcompass.core import models
        check_extra(models, f"model '{model.name}'")


def harness_speaks(harness_cls: Any, harness: str, model: ModelConfig) -> None:
    """A harness that speaks only some model APIs (`model_apis`, e.g. claude_code: anthropic) refuses the others."""
    apis = getattr(harness_cls, "model_apis", None)
    if not apis or model.name == "none" or model.api in apis:
        return
    names = {"openai": "OpenAI", "anthropic": "Anthropic"}
    raise UserError(f"harness '{harness}' speaks the {' and '.join(names.get(a, a) for a in apis)} API only; model "
                    f"'{model.name}' is api '{model.api}'; pick a model with api {' or '.join(apis)} "
                    f"(agentcompass list models) or another harness")


def harness_knows(harness_cls: Any, harness: str, model: ModelConfig, settings: dict[str, Any]) -> None:
    """An installed CLI runs only the models and tiers its pinned version knows (its `models:`)."""
    known = settings.get("models")
    if not known or not getattr(harness_cls, "needs_model", False) or model.name == "none":
        return
    from agentcompass.core.models import cli_model_name

    model_id = cli_model_name(model)
    pinned = f"{getattr(harness_cls, 'package', harness)} {settings.get('version', '')}".strip()
    own = "or list it under models: in a harness YAML of your own (--config-dir) if this version really knows it"
    if model_id not in known:
        raise UserError(f"harness '{harness}' ({pinned}) does not know model '{model_id}'; it knows "
                        f"{', '.join(known)}; pick one of those (agentcompass list models), {own}")
    tiers = known[model_id] or []
    effort = (model.reasoning_map.get(model.reasoning or "") or {}).get("reasoning_effort", model.reasoning)
    if model.reasoning is not None and model.reasoning not in tiers and effort not in tiers:
        raise UserError(f"harness '{harness}' ({pinned}) does not know tier '{model.reasoning}' of model '{model_id}'; "
                        f"it knows {', '.join(tiers)}; pass model.reasoning=TIER with one of those, {own}")


def benchmark_params(recipe: Recipe, provenance: Provenance) -> None:
    """Params the recipe's format accepts (its `Params` schema), relative paths made absolute where typed."""
    params_schema = getattr(resolve("format", recipe.format), "Params", None)  # also checks the format's extra
    if params_schema is None:  # a user format without a schema takes anything
        return
    validate(params_schema, recipe.params, "benchmark.params", provenance)
    for key in getattr(params_schema, "path_keys", ()):
        for section, where in ((recipe.params, f"benchmark.params.{key}"), (recipe.source, f"benchmark.source.{key}")):
            anchor_path(section, key, provenance.of(where))


def anchor_path(section: dict[str, Any], key: str, source: Source | None) -> None:
    """A relative path typed on the command line is relative to the current directory, one in a
    YAML file (a --config file, the recipe) to that file's directory."""
    value = section.get(key)
    if not isinstance(value, str) or not value or source is None:
        return
    path = Path(value).expanduser()
    section[key] = str(path if path.is_absolute() else source.base_dir / path)


def results_dir(path_text: str, provenance: Provenance) -> None:
    """The results dir is, or can be made as, a directory this process can write to."""
    path = Path(path_text)
    origin = provenance.describe("run.results_dir")
    existing = next((p for p in (path, *path.parents) if p.exists()), Path("."))
    if not existing.is_dir():
        where = "is a file" if existing == path else f"cannot be made: '{existing}' is a file"
        raise UserError(f"results dir '{path}'{origin} {where}; pass a directory with --results-dir DIR")
    try:  # a real probe: as root, os.access says yes even where mkdir fails (/proc, read-only mounts)
        Path(tempfile.mkdtemp(prefix=".agentcompass-probe-", dir=existing)).rmdir()
    except OSError as exc:
        raise UserError(f"results dir '{path}'{origin} is not writable: nothing can be created in '{existing}' "
                        f"({exc.strerror or exc}); pass a directory you can write to with --results-dir DIR") from exc
