from agentcompass.commands.cli import entry

entry()
