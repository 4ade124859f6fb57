"""Self-hosted model endpoints a preset can bring up itself (`agentcompass endpoint up|status|down`)."""
