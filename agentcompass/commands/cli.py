"""The `agentcompass` command line: argv → Hydra overrides → composed, validated runs.

Only argparse and the standard library are imported at start-up; Hydra, the SDKs and
the execution core load when a command needs them, so `--help` and `list` stay fast.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import traceback
from pathlib import Path
from typing import Any, NoReturn

from agentcompass import __version__
from agentcompass.commands.args import Parser, add_selection_args, build_invocation, run_name_of, selection
from agentcompass.core.errors import UserError
from agentcompass.core.secret_values import ScrubbedStream, public_argv, register_environment

EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130
PR_SET_THP_DISABLE = 41  # prctl(2)

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


def build_parser() -> Parser:
    parser = Parser(prog="agentcompass", description="Run coding-agent benchmarks: any benchmark, harness, model and environment.")
    parser.add_argument("--version", action="version", version=f"agentcompass {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    run = sub.add_parser("run", help="run a benchmark with a harness and a model", epilog=RUN_EXAMPLES,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    add_selection_args(run)
    run.add_argument("--analyze", action="store_true",
                     help="when the run ends, analyze it as `agentcompass analyze` does (flags, failure modes)")
    run.add_argument("--analyze-judge", metavar="MODEL",
                     help="... and have MODEL judge every attempt (implies --analyze; checked before the run starts)")
    lst = sub.add_parser("list", help="list benchmarks, harnesses, models and envs; or a benchmark's task ids",
                         epilog=LIST_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    lst.add_argument("group", nargs="?", choices=["benchmarks", "harnesses", "models", "envs", "tasks"],
                     help="what to list (default: all but tasks)")
    lst.add_argument("benchmark", nargs="?", metavar="BENCHMARK", help="with tasks: the benchmark whose ids to list")
    lst.add_argument("--registry", metavar="NAME", help="with benchmarks: the datasets of a registry (harbor), "
                     "with versions and task counts")
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

    after = None
    if args.analyze or args.analyze_judge:
        from agentcompass.commands.analyze import after_run

        after = after_run(args)  # a judge that cannot answer is refused here, before any trial
    return launch(invocation, multirun=args.multirun, argv=argv, after=after)


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
    if getattr(args, "registry", None):
        from agentcompass.commands.registry import print_registry

        return print_registry(args.registry, args.group, list(args.config))
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
            if plural == "benchmarks":
                from agentcompass.core.catalog import recipe_marks

                status = f"  {recipe_marks(name, path, roots)}"
            print(f"  {name.ljust(width)}  {describe(path, roots)}{status}")
    return 0


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def hide_secrets_from_process_list() -> None:
    """A key typed on the command line (--model-api-key, model.api_key=...) leaves /proc/PID/cmdline, which any
    local user can read, as soon as the process starts: `setproctitle` rewrites the argv memory the kernel shows."""
    shown = public_argv(sys.argv)
    if shown != sys.argv:
        try:
            from setproctitle import setproctitle
        except ImportError:  # an install older than the dependency: --model-api-key-file is the way
            return
        setproctitle(" ".join([os.path.basename(sys.executable), *shown]))


def main(argv: list[str] | None = None) -> int:
    in_process = argv is not None  # a caller's own streams come back; the CLI's stay scrubbed for a crash's traceback
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = os.environ.get("AGENTCOMPASS_DEBUG") == "1"
    hide_secrets_from_process_list()
    register_environment()  # a key read from OPENAI_API_KEY & co. is scrubbed from the console and files
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = ScrubbedStream(sys.stdout), ScrubbedStream(sys.stderr)
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
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly, as a Unix tool does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error flushing at exit
        return 128 + 13  # SIGPIPE's status
    finally:
        gc.enable()  # cmd_run turned it off; an error before the run leaves it so
        if in_process:
            sys.stdout, sys.stderr = streams


def entry() -> NoReturn:
    from agentcompass.core.process_exit import leave

    leave(main())
