"""The `agentcompass` command line: argv → Hydra overrides → composed, validated runs.

Only argparse and the standard library are imported at start-up; Hydra, the SDKs and
the execution core load when a command needs them, so `--help` and `list` stay fast.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, NoReturn

from agentcompass import __version__
from agentcompass.core.errors import UserError

EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130
PR_SET_THP_DISABLE = 41  # prctl(2)
RUN_NAME_SUFFIX_LEN = 4  # 36**4 names per microsecond

RUN_EXAMPLES = """examples:
  agentcompass run demo oracle none
  agentcompass run demo nop none --env local --k 3 --task-concurrency 8
  agentcompass run swebench_verified mini_swe_agent openai/gpt-4o-mini --env docker \\
      --benchmark-params '{"limit": 5}'
  agentcompass run demo oracle none -m run.k=1,2          # a Hydra multirun: two runs
  agentcompass run demo oracle none -m run.k=1,2 --sweep-parallel   # ... both at once, in one pool
  agentcompass run demo oracle none --config ~/secrets.yaml --run-name nightly
"""


LIST_EXAMPLES = """examples:
  agentcompass list
  agentcompass list envs
  agentcompass list tasks demo
  agentcompass list tasks swebench_verified --benchmark-params '{"filter": "^django", "limit": 5}' --json
"""


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
    parser.add_argument("--model-api-key", metavar="KEY", help="the model API key (never written anywhere)")
    add_overlay_args(parser)
    if with_run_flags:
        parser.add_argument("--task-concurrency", type=positive_int, metavar="N", help="trials at once (default 4)")
        parser.add_argument("--k", type=positive_int, metavar="N", help="attempts per task (default 1)")
        parser.add_argument("--max-retries", type=non_negative_int, metavar="N", help="infra retries (default 2)")
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


def build_parser() -> Parser:
    parser = Parser(prog="agentcompass", description="Run coding-agent benchmarks: any benchmark, harness, model and environment.")
    parser.add_argument("--version", action="version", version=f"agentcompass {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    run = sub.add_parser("run", help="run a benchmark with a harness and a model", epilog=RUN_EXAMPLES,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    add_selection_args(run)
    lst = sub.add_parser("list", help="list benchmarks, harnesses, models and envs; or a benchmark's task ids",
                         epilog=LIST_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    lst.add_argument("group", nargs="?", choices=["benchmarks", "harnesses", "models", "envs", "tasks"],
                     help="what to list (default: all but tasks)")
    lst.add_argument("benchmark", nargs="?", metavar="BENCHMARK", help="with tasks: the benchmark whose ids to list")
    lst.add_argument("--config-dir", action="append", default=[], type=Path, metavar="DIR",
                     help="user dir with recipes/ harnesses/ providers/ models/ (repeatable)")
    from agentcompass.commands.list_tasks import add_arguments

    add_arguments(lst)
    cfg = sub.add_parser("config", help="inspect the composed config; set up an env (gcp)")
    cfg_sub = cfg.add_subparsers(dest="config_command", metavar="show|gcp", parser_class=Parser, required=True)
    show = cfg_sub.add_parser("show", help="print the composed config as YAML, secrets redacted")
    add_selection_args(show)
    from agentcompass.commands import config_gcp

    config_gcp.register(cfg_sub)
    for module in extra_commands().values():
        module.register(sub)
    return parser


def extra_commands() -> dict[str, Any]:
    import importlib

    from agentcompass.commands import COMMAND_MODULES

    return {name: importlib.import_module(path) for name, path in COMMAND_MODULES.items()}


def split_words(words: list[str]) -> tuple[list[str], list[str]]:
    names = [w for w in words if "=" not in w]
    overrides = [w for w in words if "=" in w]
    return names, overrides


def build_invocation(args: argparse.Namespace, names: list[str], extra: list[str]) -> "Any":
    """Turn parsed flags into Hydra overrides, remembering which flag or text gave each; JSON and names are checked here."""
    from agentcompass.core.config import CUSTOM_MODEL, GROUPS, Invocation, check_choice, group_entries, is_secret_override
    from agentcompass.core.overrides import PARAM_TARGETS, flatten, hydra_value, parse_json_object

    invocation = Invocation(overrides=[], config_files=list(args.config), config_dirs=list(args.config_dir),
                            model_api_key=args.model_api_key)
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
                 "env_open_qps": "run.env_open_qps", "sweep_parallel": "run.sweep_parallel"}
    for flag, key in run_flags.items():
        value = getattr(args, flag, None)
        if value is not None:
            typed[f"{key}={hydra_value(value)}"] = flag_name(flag)
    invocation.overrides = list(typed)
    for override in extra:
        key, _, value = override.partition("=")
        if is_secret_override(override):
            invocation.secret_values[key.lstrip("+")] = value
            typed[f"{key}=***"] = f"'{key}=***'"
        else:
            invocation.overrides.append(force_add(override))
            typed[force_add(override)] = f"'{override}'"
    invocation.typed = typed
    return invocation


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


def no_huge_pages() -> None:
    """Transparent huge pages off for this process and the workers it forks (agentcompass.core.shards): where
    the kernel gives a growing heap 2 MiB pages, every forked worker's first write to one costs a huge
    copy. Measured with 10,000 trials on 2 workers: 24 s of CPU with them, 12 s without. Best effort."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux
        pass


def cmd_run(args: argparse.Namespace, argv: list[str]) -> int:
    gc.disable()  # over the imports too; launch() turns the cycle collector back on when the trials start
    no_huge_pages()
    names, extra = selection(args, "run")
    args.run_name = run_name_of(args)
    invocation = build_invocation(args, names, extra)
    from agentcompass.core.launch import launch

    return launch(invocation, multirun=args.multirun, argv=argv)


def cmd_config(args: argparse.Namespace, argv: list[str]) -> int:
    if getattr(args, "config_command", "show") == "gcp":
        from agentcompass.commands import config_gcp

        return config_gcp.handle(args, argv)
    return cmd_config_show(args, argv)


def cmd_config_show(args: argparse.Namespace, argv: list[str]) -> int:
    names, extra = selection(args, "config show")
    args.run_name = args.run_name if getattr(args, "run_name", None) else "<timestamp>"
    invocation = build_invocation(args, names, extra)
    invocation.writes_results = False  # only shows: a results dir it cannot write is no error here
    from agentcompass.core.launch import show_config

    print(show_config(invocation, multirun=args.multirun), end="")
    return 0


def cmd_list(args: argparse.Namespace, argv: list[str]) -> int:
    from agentcompass.commands.env import cheap_status
    from agentcompass.core.config import PLURALS, describe, group_entries, search_roots

    if args.group == "tasks":
        from agentcompass.commands.list_tasks import print_tasks

        return print_tasks(args)
    if args.benchmark is not None:
        raise UserError(f"agentcompass list {args.group or ''}: unexpected {args.benchmark!r}; "
                        f"a BENCHMARK goes with `agentcompass list tasks BENCHMARK`")
    roots = search_roots(list(args.config_dir))
    groups = [args.group] if args.group else list(PLURALS)
    for plural in groups:
        entries = group_entries(PLURALS[plural], roots)
        print(f"{plural}:")
        width = max((len(n) for n in entries), default=0)
        for name, path in sorted(entries.items()):
            status = f"  {cheap_status(name, roots)}" if plural == "envs" else ""
            print(f"  {name.ljust(width)}  {describe(path, roots)}{status}")
    return 0


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = os.environ.get("AGENTCOMPASS_DEBUG") == "1"
    try:
        parser = build_parser()
        command = argv[0] if argv else None
        commands = subcommands(parser)
        if command not in commands:
            parser.parse_args(argv)  # --help, --version, or an unknown command (one-line error)
            parser.print_help()
            return 0
        sub = commands[command]
        nested = subcommands(sub)  # `config show`, `env check`
        if nested:
            if len(argv) < 2 or argv[1] not in (*nested, "-h", "--help"):
                raise UserError(f"agentcompass {command}: expected {' or '.join(repr(n) for n in nested)}; "
                                f"see 'agentcompass {command} --help'")
            if argv[1] not in nested:
                sub.print_help()
                return 0
            sub, argv = nested[argv[1]], argv[1:]
        # Intermixed parsing: flags, names and KEY=VALUE overrides in any order.
        args = sub.parse_intermixed_args(argv[1:])
        args.command = command
        handlers = {"run": cmd_run, "list": cmd_list, "config": cmd_config,
                    **{name: module.handle for name, module in extra_commands().items()}}
        return handlers[command](args, argv)
    except UserError as exc:
        if debug:
            traceback.print_exc()
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("interrupted: open sandboxes closed; rerun with the same --run-name to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        gc.enable()  # cmd_run turned it off; an error before the run leaves it so


def entry() -> NoReturn:
    sys.exit(main())
