"""What the commands share of the command line: the one-line-error parser, flag types and groups, and
argv -> an Invocation of Hydra overrides (each remembering the flag that gave it), and run names.
A leaf: cli.py and every command module import it, and it imports none of them."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any, NoReturn

from agentcompass.core.errors import UserError

RUN_NAME_SUFFIX_LEN = 4  # 36**4 names per microsecond


class Parser(argparse.ArgumentParser):
    """argparse that reports bad usage as one line and exit code 2."""

    def error(self, message: str) -> NoReturn:
        raise UserError(f"{self.prog}: {message}; see '{self.prog} --help'")


def whole_number(minimum: int) -> Any:
    """An argparse type: a whole number of at least `minimum`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected a number >= {minimum}, got {value}")
        return value

    return parse

positive_int = whole_number(1)

non_negative_int = whole_number(0)


def add_overlay_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", action="append", default=[], type=Path, metavar="FILE",
                        help="private YAML overlay, highest precedence (repeatable; e.g. credentials)")
    parser.add_argument("--config-dir", action="append", default=[], type=Path, metavar="DIR",
                        help="user dir with recipes/ harnesses/ providers/ models/ (repeatable)")


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text}")
    return value


def add_pacing_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--provider-limit", type=positive_int, metavar="N",
                        help="at most N sandboxes of the env open at once (default: no limit)")
    parser.add_argument("--env-open-qps", type=positive_float, metavar="Q",
                        help="at most Q sandbox creations a second (default: no limit; modal 4)")


def add_timeout_args(parser: argparse.ArgumentParser) -> None:
    """Harbor's timeout multipliers, under Harbor's flag names (core/limits.py)."""
    parser.add_argument("--timeout-multiplier", type=positive_float, metavar="X",
                        help="multiply every phase's time limit (default 1)")
    for phase, what in (("agent", "the agent's"), ("verifier", "the verifier's"),
                        ("agent-setup", "an installed agent's setup"), ("environment-build", "the environment build's")):
        parser.add_argument(f"--{phase}-timeout-multiplier", type=positive_float, metavar="X",
                            help=f"multiply {what} time limit (overrides --timeout-multiplier)")


def env_help(default: str | None = "local") -> str:
    """--env's help: the envs that have a YAML (never one that would answer `unknown env`); None: no default."""
    from agentcompass.core.catalog import known_envs

    said = f"default {default}; " if default else ""
    return f"execution environment: {', '.join(known_envs())} ({said}see `agentcompass list envs`)"


def add_selection_args(parser: argparse.ArgumentParser, with_run_flags: bool = True) -> None:
    parser.add_argument("words", nargs="*", metavar="BENCHMARK HARNESS MODEL [KEY=VALUE ...]",
                        help="names from `agentcompass list`, then Hydra overrides; MODEL is a preset, "
                             "a provider/model string, or none")
    parser.add_argument("--env", default=None, help=env_help())
    parser.add_argument("--benchmark-params", metavar="JSON", help="deep-merged into benchmark.params")
    parser.add_argument("--harness-params", metavar="JSON", help="deep-merged into harness")
    parser.add_argument("--env-params", metavar="JSON", help="deep-merged into env")
    parser.add_argument("--model-params", metavar="JSON", help="deep-merged into model.params")
    parser.add_argument("--model-base-url", metavar="URL", help="the model endpoint's base URL")
    parser.add_argument("--model-api-key", metavar="KEY",
                        help="the model API key (never written anywhere; --model-api-key-file keeps it off the command line)")
    parser.add_argument("--model-api-key-file", metavar="FILE",
                        help="read the model API key from FILE ('-': standard input); preferred over --model-api-key")
    add_overlay_args(parser)
    if with_run_flags:
        parser.add_argument("--task-concurrency", type=positive_int, metavar="N", help="trials at once (default 4)")
        parser.add_argument("--k", type=positive_int, metavar="N", help="attempts per task (default 1)")
        parser.add_argument("--max-retries", type=non_negative_int, metavar="N", help="infra retries (default 2)")
        add_timeout_args(parser)
        add_pacing_args(parser)
        parser.add_argument("--results-dir", metavar="DIR", help="default results/")
        parser.add_argument("--run-name", metavar="NAME", help="default: the start time to the microsecond and a random suffix; reuse a name to resume")
        parser.add_argument("--retry-errors", action="store_true", default=None,
                            help="on resume, rerun the attempts recorded as errors")
        parser.add_argument("--new-run", action="store_true", default=None,
                            help="when the run name holds a run with other settings, start NAME-2 (-3, ...) beside it")
        parser.add_argument("--no-model-check", dest="model_check", action="store_false", default=None,
                            help="skip the 1-token model request sent before the first trial (for per-call billing)")
        parser.add_argument("-m", "--multirun", action="store_true", help="sweep comma-separated values (Hydra multirun)")
        parser.add_argument("--sweep-parallel", action="store_true", default=None,
                            help="with -m: run every job of the sweep at once, their trials in one pool under "
                                 "one --task-concurrency (default: one job after the other)")


def split_words(words: list[str]) -> tuple[list[str], list[str]]:
    names = [w for w in words if "=" not in w]
    overrides = [w for w in words if "=" in w]
    return names, overrides


def build_invocation(args: argparse.Namespace, names: list[str], extra: list[str]) -> "Any":
    """Turn parsed flags into Hydra overrides, remembering which flag or text gave each; JSON and names are checked here."""
    from agentcompass.core import secret_values
    from agentcompass.core.config import (CUSTOM_MODEL, GROUPS, Invocation, check_choice, group_entries, hidden_value,
                                          is_secret_key, is_secret_override)
    from agentcompass.core.overrides import PARAM_TARGETS, flatten, hydra_value, parse_json_object

    invocation = Invocation(overrides=[], config_files=list(args.config), config_dirs=list(args.config_dir),
                            model_api_key=model_api_key(args))
    from agentcompass.commands.registry import registry_benchmarks

    names = [registry_benchmarks(invocation, names[0]), *names[1:]]  # harbor:NAME@VERSION: a generated recipe
    roots = invocation.roots()
    for path in invocation.config_files:
        if not path.is_file():
            raise UserError(f"--config file '{path}' does not exist; pass a YAML file")
    benchmark, harness, model = names
    typed: dict[str, str] = {}
    for key, value in (("benchmark", benchmark), ("harness", harness), ("env", args.env or "local")):
        for item in value.split(","):
            check_choice(key, item, roots)
        typed[f"{GROUPS[key][1]}={value}"] = "--env" if key == "env" else key.upper()
    presets = group_entries("model", roots)
    model_items = model.split(",")
    if all(m in presets for m in model_items):
        typed[f"{GROUPS['model'][1]}={model}"] = "MODEL"
    elif all("/" in m for m in model_items):
        typed[f"{GROUPS['model'][1]}={CUSTOM_MODEL}"] = "MODEL"
        typed[f"model.name={','.join(hydra_value(m) for m in model_items)}"] = "MODEL"
    else:
        bad = next(m for m in model_items if m not in presets and "/" not in m)
        check_choice("model", bad, roots)  # raises, naming the closest preset
        raise UserError("MODEL sweeps must be all presets or all provider/model strings")
    for flag, target in PARAM_TARGETS.items():
        text = getattr(args, flag)
        if text is not None:
            typed.update(dict.fromkeys(flatten(target, parse_json_object(flag, text)), flag_name(flag)))
    if args.model_base_url:
        typed[f"++model.base_url={hydra_value(args.model_base_url)}"] = "--model-base-url"
    run_flags = {"task_concurrency": "run.task_concurrency", "k": "run.k", "max_retries": "run.max_retries",
                 "results_dir": "run.results_dir", "run_name": "run.run_name", "retry_errors": "run.retry_errors",
                 "new_run": "run.new_run", "model_check": "run.model_check", "provider_limit": "run.provider_limit",
                 "env_open_qps": "run.env_open_qps", "sweep_parallel": "run.sweep_parallel",
                 **{key: f"run.{key}" for key in ("timeout_multiplier", "agent_timeout_multiplier",
                                                  "verifier_timeout_multiplier", "agent_setup_timeout_multiplier",
                                                  "environment_build_timeout_multiplier")}}
    for flag, key in run_flags.items():
        value = getattr(args, flag, None)
        if value is not None:
            typed[f"{key}={hydra_value(value)}"] = flag_name(flag)
    secret_typed: dict[str, str] = {}
    for override in extra:
        key, _, value = override.partition("=")
        if is_secret_override(override):
            invocation.secret_values[key.lstrip("+")] = value
            secret_values.register(value)
            secret_typed[f"{key}=***"] = f"'{key}=***'"
        else:
            typed[force_add(override)] = f"'{override}'"
    for override, label in typed.items():  # a secret under an innocent key (a header, a URL's password) skips Hydra
        hidden = hidden_value(override)
        if hidden is None:
            invocation.overrides.append(override)
            invocation.typed[override] = label
        else:
            invocation.hidden_values[hidden[0]] = hidden[1]
            secret_values.register_tree({hidden[0].rpartition(".")[2]: hidden[1]}, is_secret_key(hidden[0].rpartition(".")[2]))
            invocation.typed[f"{hidden[0]}=***"] = f"'{hidden[0]}=***'" if label.startswith("'") else label
    invocation.typed.update(secret_typed)
    return invocation


def model_api_key(args: argparse.Namespace) -> str | None:
    """--model-api-key, or the key read from --model-api-key-file (`-`: standard input), checked."""
    import sys

    key, path = getattr(args, "model_api_key", None), getattr(args, "model_api_key_file", None)
    if path is None:
        if key is not None and not key.strip():
            raise UserError("--model-api-key is empty; pass the key, or --model-api-key-file FILE")
        if key is not None:
            from agentcompass.core import secret_values

            secret_values.register(key)
        return key
    if key is not None:
        raise UserError("pass either --model-api-key or --model-api-key-file, not both")
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"--model-api-key-file: cannot read '{path}' ({exc.strerror or type(exc).__name__}); "
                        f"pass a file holding the key, or '-' to read it from standard input") from None
    key = text.strip()
    from agentcompass.core import secret_values

    secret_values.register(key)
    if not key or "\n" in key:
        raise UserError(f"--model-api-key-file '{path}' {'is empty' if not key else 'holds more than one line'}; "
                        f"it must hold the key alone")
    return key


def flag_name(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def force_add(override: str) -> str:
    """`a.b=v` may set a key the YAML leaves out (Hydra's `++`): the schema still rejects typos."""
    key = override.partition("=")[0]
    if key.startswith(("+", "~")) or "@" in key or "/" in key or key.startswith("hydra."):
        return override
    return f"++{override}"


def selection(args: argparse.Namespace, command: str) -> tuple[list[str], list[str]]:
    names, extra = split_words(args.words)
    if len(names) != 3:
        raise UserError(f"{command} needs BENCHMARK HARNESS MODEL, got {len(names)} name(s): {' '.join(names) or 'none'}; "
                        f"e.g. agentcompass {command} demo oracle none")
    return names, extra


def run_name_of(args: argparse.Namespace, prefix: str = "") -> str:
    """--run-name as given (checked), or a new name: PREFIX + the local time to the microsecond + a random
    suffix (`20261201-083730-123456-k3f9`), so runs started at once by a script never pick the same one."""
    if args.run_name is None:
        return default_run_name(prefix)
    if not args.run_name or "/" in args.run_name or args.run_name.startswith("."):
        raise UserError(f"--run-name {args.run_name!r} must be a plain name (no '/', not starting with '.')")
    return str(args.run_name)


def default_run_name(prefix: str = "", now: float | None = None) -> str:
    import secrets
    import string

    stamp = time.time() if now is None else now
    micro = int(stamp * 1_000_000) % 1_000_000
    suffix = "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(RUN_NAME_SUFFIX_LEN))
    return f"{prefix}{time.strftime('%Y%m%d-%H%M%S', time.localtime(stamp))}-{micro:06d}-{suffix}"
