from agentcompass.cli import entry

entry()
