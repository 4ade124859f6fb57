"""A third-party extension of agentcompass, written as a user would: it imports only agentcompass.api."""
