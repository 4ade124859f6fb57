"""`agentcompass env check ENV`: which credentials and settings a run on ENV would use, and whether they work.

Prints where each comes from (a --config file, an environment variable, a ~/.modal.toml profile), never
a secret's value; then a live check (modal: the client's hello; docker: the engine; local: bubblewrap).
Exit 0 when ready, else 1 with the setup steps.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

EXAMPLES = """examples:
  agentcompass env check modal
  agentcompass env check modal --config ~/agentcompass-secrets.yaml
  agentcompass env check docker
"""
COMMON_KEYS = ("name", "description", "impl")


def register(subparsers: Any) -> None:
    from agentcompass.commands.args import Parser, add_overlay_args, env_help

    parser = subparsers.add_parser("env", help="check that an execution environment is ready (credentials, engine)")
    sub = parser.add_subparsers(dest="env_command", metavar="check", parser_class=Parser, required=True)
    check = sub.add_parser("check", help="say which credentials and settings ENV uses and whether they work",
                           epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    check.add_argument("env", metavar="ENV", help=env_help(default=None))  # required: no default
    add_overlay_args(check)


def handle(args: argparse.Namespace, argv: list[str]) -> int:
    from agentcompass.core.catalog import check_choice, search_roots

    roots = search_roots(list(args.config_dir))
    check_choice("env", args.env, roots)
    cls, settings, source = env_settings(args.env, roots, list(args.config))
    report = missing_sdk(cls, args.env) or readiness_of(cls, settings, live=True, config_source=source)
    print(f"env {args.env}: {'ready' if report.ready else 'not ready'}")
    for fact in report.facts:
        print(f"  {fact}")
    if report.steps:
        print("setup:")
        for number, step in enumerate(report.steps, 1):
            print(f"  {number}. {step}")
    return 0 if report.ready else 1


def missing_sdk(cls: Any, env: str) -> Any:
    """Not ready, with the pip install as its first step, when the env's SDK (its extra) is not installed;
    None when it is. An env whose SDK is missing is not ready yet, not a mistyped command."""
    from agentcompass.core.readiness import Readiness
    from agentcompass.core.registry import installed

    missing = [module for module in getattr(cls, "extra_modules", ()) if not installed(module)]
    if not missing:
        return None
    extra = getattr(cls, "extra", None)
    from agentcompass.core.install import pip_install

    install = pip_install(extra) if extra else f"pip install {' '.join(missing)}"
    return Readiness().fail(f"SDK: {', '.join(missing)} not installed", install, f"agentcompass env check {env}")


def env_settings(env: str, roots: list[Path], config_files: list[Path]) -> tuple[Any, dict[str, Any], str]:
    """The provider class, its settings (shipped YAML, then each --config's environments.ENV), and which
    --config file gave the credentials ('' when none did)."""
    from omegaconf import DictConfig, OmegaConf

    from agentcompass.core.catalog import group_entries
    from agentcompass.core.config import load_overlay, resolved_section
    from agentcompass.core.registry import load

    merged = OmegaConf.create({"env": OmegaConf.load(group_entries("env", roots)[env])})
    source = ""
    for path in config_files:
        block = OmegaConf.select(load_overlay(path), f"environments.{env}")
        if isinstance(block, DictConfig):
            merged = OmegaConf.merge(merged, {"env": block})
            if any(key in block for key in ("token_id", "token_secret", "credentials_file", "project_id", "token", "kubeconfig")):
                source = f"environments.{env} in --config {path}"
    data = resolved_section(merged, "env")
    cls = load("provider", data.get("impl") or data.get("name") or env)  # a missing SDK is not ready (missing_sdk)
    return cls, {k: v for k, v in data.items() if k not in COMMON_KEYS}, source


def readiness_of(cls: Any, settings: dict[str, Any], live: bool, config_source: str = "") -> Any:
    from agentcompass.core.readiness import Readiness

    check = getattr(cls, "readiness", None)
    if check is None:
        return Readiness(facts=["no readiness check for this env"])
    try:
        return check(settings, live, config_source)
    except ValueError as exc:  # the settings do not validate (pydantic)
        first = exc.errors()[0] if callable(getattr(exc, "errors", None)) else None  # type: ignore[attr-defined]
        what = (f"env.{'.'.join(map(str, first['loc']))}: {first['msg']} (got {first.get('input')!r})" if first
                else " ".join(str(exc).split())[:300])
        return Readiness().fail(f"invalid setting {what}", "fix it in your --config file or the env's YAML")


def cheap_status(env: str, roots: list[Path]) -> str:
    """`list envs`' column: readiness without the network or Hydra (the YAML read as is); never raises."""
    import yaml

    from agentcompass.core.catalog import group_entries
    from agentcompass.core.registry import load

    hint = f"see `agentcompass env check {env}`"
    try:
        data = yaml.safe_load(group_entries("env", roots)[env].read_text(encoding="utf-8")) or {}
        cls = load("provider", data.get("impl") or data.get("name") or env)
        report = missing_sdk(cls, env) or readiness_of(cls, {k: v for k, v in data.items() if k not in COMMON_KEYS},
                                                       live=False)
    except Exception as exc:  # a broken YAML must not break `list`
        return f"[not ready: {shortened(' '.join(str(exc).split()))}; {hint}]"
    if report.ready:
        return "[ready]"
    reason = report.facts[-1].split(" (")[0]
    if report.steps and report.steps[0].startswith("pip install"):
        reason += f" ({report.steps[0]})"
    return f"[not ready: {reason}; {hint}]"


def shortened(text: str, width: int = 100) -> str:
    """At most about `width` characters, cut between words (never mid-word), marked by an ellipsis."""
    if len(text) <= width:
        return text
    return text[:width].rsplit(" ", 1)[0].rstrip(",;:") + " ..."
