"""Harnesses: the agents that work inside a trial's sandbox."""
