"""Commands beyond run/list/config: each module has `register(subparsers)` and `handle(args, argv) -> int`.

These modules import only the standard library at top level, so `agentcompass --help` stays fast.
"""

COMMAND_MODULES: dict[str, str] = {
    # command name -> module, e.g. "cleanup": "agentcompass.commands.cleanup"
    "eval": "agentcompass.commands.evaluate",
    "cleanup": "agentcompass.commands.cleanup",
    "validate": "agentcompass.commands.validate",
    "report": "agentcompass.commands.report",
    "env": "agentcompass.commands.env",
    "view": "agentcompass.commands.view",
    "analyze": "agentcompass.commands.analyze",
    "import": "agentcompass.commands.import_cmd",
    "endpoint": "agentcompass.commands.endpoint",
    "regrade": "agentcompass.commands.regrade",
}
