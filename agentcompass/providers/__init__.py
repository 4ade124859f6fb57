"""Execution environments: one package per env (local, docker, modal, gcp), each making sandboxes
that honour the contract of agentcompass.core.sandbox. `remote` holds what the remote ones share."""
